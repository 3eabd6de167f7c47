"""amp-suite: measure whether PyTorch automatic mixed precision pays off on this GPU."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`from amp_suite import UserWorkload` in a user's entry; `import amp_suite` stays torch-free."""
    if name == "UserWorkload":
        from amp_suite.workloads.custom import UserWorkload

        return UserWorkload
    raise AttributeError(f"module 'amp_suite' has no attribute {name!r}")
