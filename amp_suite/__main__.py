"""The `amp-suite` command and `python -m amp_suite`."""

import gc

# The parent process only orchestrates, but it imports typer, pydantic, MLflow (SQLAlchemy,
# alembic) and matplotlib: hundreds of thousands of long-lived objects and few reference cycles.
# At the default threshold (700 allocations) the cyclic collector walks them again and again
# while they load: about a quarter of a run's CPU time in this process on a 2-core machine.
ALLOCATIONS_PER_COLLECTION = 100_000


def main() -> None:
    gc.set_threshold(ALLOCATIONS_PER_COLLECTION, *gc.get_threshold()[1:])
    from amp_suite.cli import main as run_command  # after the threshold: its imports are most of the objects

    try:
        run_command()
    finally:
        # At exit the interpreter's last collections would walk all of them once more: 1-2 s after
        # the last line is printed. Frozen, they are left to the process's end; exit handlers still run.
        gc.freeze()


if __name__ == "__main__":
    main()
