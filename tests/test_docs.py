"""What people read matches what the suite does: README.md and docs/*.md name only commands and
options the CLI has, matrices that ship, make targets that exist and links that resolve, and the
README stays an entry point (short, with the set-up commands near its top).

The CLI is introspected in-process (the click group Typer builds), not run once per command.
Options of other tools the pages show (docker, podman, pip, the scripts under scripts/) are told
apart by where they appear: in an `amp-suite CMD ...` invocation an option must be CMD's; anywhere
else it must be some amp-suite command's, or one of OTHER_TOOLS_OPTIONS.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import typer
from conftest import EXPERIMENTS, REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 300
SETUP_WITHIN = 40  # the install-and-run and the test commands, within the README's first lines
SETUP_COMMANDS = ("make run", "make test")

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")  # inline code, which may wrap onto a second line
# `amp-suite CMD`, `.venv/bin/amp-suite CMD`, or the image `amp-suite:cu130 CMD` (its entrypoint)
INVOCATION = re.compile(r"\bamp-suite(?::[\w.-]+)?[ \t]+([a-z][\w-]*)(.*?)(?=\bamp-suite\b|$)")
TAIL_END = re.compile(r"\s#|;|&&|\|\||`")  # a comment or the next shell command ends an invocation
OPTION = re.compile(r"(?<![\w-])--[a-z][\w-]*")
MATRIX_NAME = re.compile(r"--matrix[ \t]+([\w.-]+)")
EXPERIMENT_FILE = re.compile(r"\bexperiments/([\w.-]+\.yaml)")
MAKE_TARGET = re.compile(r"(?:^|&&)\s*make\s+([a-z][\w-]*)")  # a command, not "make room" in a message
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)

# Options of other programs the pages show, by program (the scripts' own come from their sources):
# outside an `amp-suite CMD` invocation an option must be one of these or some amp-suite command's.
OTHER_TOOLS_OPTIONS = {
    "docker/podman": {"--rm", "--gpus", "--ipc", "--shm-size", "--user", "--build-arg", "--format", "--profile",
                      "--wait"},
    "pip": {"--no-index", "--target"},
    "torchrun": {"--standalone", "--nproc_per_node"},
    "py-spy": {"--subprocesses"},
    "coverage": {"--fail-under"},
}  # fmt: skip
SCRIPTS = REPO / "scripts"


@functools.cache
def cli_options() -> dict[str, frozenset[str]]:
    """Each command's options, as the click group Typer builds from the app, `--help` included."""
    from amp_suite.cli import app

    group = typer.main.get_command(app)
    return {
        name: frozenset({"--help", *(o for p in command.params for o in (*p.opts, *p.secondary_opts) if o[:2] == "--")})
        for name, command in group.commands.items()
    }


@functools.cache
def other_options() -> frozenset[str]:
    """Options of the scripts under scripts/ (as their sources spell them) and of OTHER_TOOLS_OPTIONS."""
    sources = [path.read_text() for path in sorted(SCRIPTS.glob("*.*")) if path.suffix in (".py", ".sh")]
    return frozenset(option for text in sources for option in OPTION.findall(text)).union(*OTHER_TOOLS_OPTIONS.values())


def code_snippets(markdown: str) -> list[str]:
    """The code blocks (their lines, a backslash continuation joined) and the inline code outside them."""
    snippets = []
    for block in FENCE.findall(markdown):
        snippets += block.replace("\\\n", " ").splitlines()
    prose = FENCE.sub("", markdown)
    snippets += [span.replace("\n", " ") for span in INLINE.findall(prose)]
    return snippets


def cli_problems(markdown: str) -> list[str]:
    """Every amp-suite command and option in the code of `markdown` that the CLI does not have."""
    commands = cli_options()
    known_anywhere = frozenset().union(*commands.values()) | other_options()
    problems = []
    for snippet in code_snippets(markdown):
        rest = snippet
        for match in INVOCATION.finditer(snippet):
            command, tail = match.group(1), TAIL_END.split(match.group(2))[0]
            if command not in commands:
                problems.append(f"amp-suite {command}: no such command (in {snippet.strip()!r})")
                continue
            unknown = [option for option in OPTION.findall(tail) if option not in commands[command]]
            problems += [f"amp-suite {command} {option}: no such option" for option in unknown]
            rest = rest.replace(match.group(1) + tail, "", 1)
        problems += [f"{o}: no amp-suite command has it (in {snippet.strip()!r})" for o in OPTION.findall(rest)
                     if o not in known_anywhere]  # fmt: skip
    return problems


def matrix_problems(markdown: str) -> list[str]:
    """Shipped matrices named by `--matrix NAME` or `experiments/NAME.yaml` that are not in experiments/."""
    # `--matrix my.yaml` is a path (the user's own file) and `--matrix PATH` a placeholder.
    named = {
        m + ".yaml"
        for s in code_snippets(markdown)
        for m in MATRIX_NAME.findall(s)
        if not m.endswith(".yaml") and not m.isupper()
    }
    named |= set(EXPERIMENT_FILE.findall(markdown))
    return [f"experiments/{name}: no such matrix" for name in sorted(named) if not (EXPERIMENTS / name).is_file()]


@functools.cache
def makefile_targets() -> frozenset[str]:
    return frozenset(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


def make_problems(markdown: str) -> list[str]:
    targets = {t for s in code_snippets(markdown) for t in MAKE_TARGET.findall(s)}
    return [f"make {t}: no such target in the Makefile" for t in sorted(targets - makefile_targets())]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", markdown))}


def link_problems(markdown: str, page: Path) -> list[str]:
    """Relative links in `markdown` (on `page`) whose file, or heading anchor, is not there."""
    problems = []
    for target in LINK.findall(FENCE.sub("", markdown)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file():
            problems.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            problems.append(f"{target}: no heading with that anchor in {file.name}")
    return problems


TEST_NAMED = re.compile(r"\b(test_\w+\.py)(?:::(test_\w+)\b(?!\.\.\.))?")  # "test_x_..." abbreviates


def cited_test_problems(markdown: str) -> list[str]:
    """Each test file the docs cite as evidence, and each test named in full, exists under tests/."""
    problems = []
    for file, test in TEST_NAMED.findall(markdown):
        found = list((REPO / "tests").rglob(file))
        if not found:
            problems.append(f"{file}: no such test file")
        elif test and not any(re.search(rf"^def {test}\(", path.read_text(), re.M) for path in found):
            problems.append(f"{file}::{test}: no such test")
    return problems


def page_problems(page: Path) -> list[str]:
    text = page.read_text()
    found = cli_problems(text) + matrix_problems(text) + make_problems(text) + link_problems(text, page)
    found += cited_test_problems(text)
    return [f"{page.relative_to(REPO)}: {problem}" for problem in found]


def test_every_command_option_matrix_target_and_link_the_pages_name_exists():
    assert len(PAGES) > 10, "docs/ has the pages the README's index lists"
    problems = [problem for page in PAGES for problem in page_problems(page)]
    assert problems == []


def test_the_readme_is_an_entry_point_with_the_set_up_commands_at_its_top():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES
    top = "\n".join(lines[:SETUP_WITHIN])
    for command in SETUP_COMMANDS:
        assert re.search(rf"^{command}\b", top, re.M), f"{command!r} is not in the README's first {SETUP_WITHIN} lines"


def test_the_readme_indexes_every_docs_page():
    readme = README.read_text()
    assert [page.name for page in PAGES[1:] if f"(docs/{page.name})" not in readme] == []


def test_the_shipped_matrix_list_names_every_matrix_in_experiments():
    text = (REPO / "docs" / "matrices.md").read_text()
    listed = re.search(r"^- `--matrix` takes .*?(?=^- )", text, re.M | re.S).group(0)
    assert set(re.findall(r"`([\w-]+)`", listed)) - {"--matrix"} == {path.stem for path in EXPERIMENTS.glob("*.yaml")}


def test_the_checks_catch_what_does_not_exist():
    """Each check, fed a made-up snippet, reports it; the same snippet made right passes."""
    assert cli_problems("```bash\namp-suite run --matrix smoke --frobnicate\n```") == [
        "amp-suite run --frobnicate: no such option"
    ]
    assert cli_problems("Run `amp-suite run --frobnicate`.") == ["amp-suite run --frobnicate: no such option"]
    assert cli_problems("`amp-suite report --gpus all`") == ["amp-suite report --gpus: no such option"]
    assert cli_problems("`amp-suite frobnicate`")[0].startswith("amp-suite frobnicate: no such command")
    assert cli_problems("Pass `--frobnicate`.")[0].startswith("--frobnicate: no amp-suite command has it")
    assert cli_problems("```\namp-suite summary runs; amp-suite ui --port 5001  # two commands\n```") == []
    assert cli_problems("```\namp-suite summary runs; amp-suite run --port 5001\n```") == [
        "amp-suite run --port: no such option"
    ]
    assert matrix_problems("`amp-suite run --matrix no-such`") == ["experiments/no-such.yaml: no such matrix"]
    assert matrix_problems("see experiments/nope.yaml") == ["experiments/nope.yaml: no such matrix"]
    assert matrix_problems("`amp-suite run --matrix smoke --matrix my-own.yaml --matrix PATH`") == []
    assert make_problems("`make frobnicate`") == ["make frobnicate: no such target in the Makefile"]
    cited = "`test_config.py`, `test_smoke.py::test_nothing_like_it`, `test_smoke.py::test_...`"
    assert cited_test_problems(cited) == [
        "test_config.py: no such test file",
        "test_smoke.py::test_nothing_like_it: no such test",
    ]
    assert link_problems("[a](docs/nope.md) [b](docs/modes.md#no-such-heading) [c](docs/modes.md)", README) == [
        "docs/nope.md: no such file",
        "docs/modes.md#no-such-heading: no heading with that anchor in modes.md",
    ]


def command_list_problems(block: str) -> list[str]:
    """What docs/matrices.md's command list lacks: a command the CLI has, or one of its options."""
    listed: dict[str, set[str]] = {}
    command = None
    for line in block.splitlines():
        if found := re.match(r"amp-suite\s+([a-z][\w-]*)", line):
            command = found.group(1)
        if command is not None:
            listed.setdefault(command, set()).update(OPTION.findall(line))
    problems = [f"amp-suite {name}: not in the command list" for name in cli_options() if name not in listed]
    for name, options in listed.items():
        negated = {f"--no-{option[2:]}" for option in options}  # a flag's --no- form goes with it
        missing = sorted(cli_options().get(name, frozenset()) - options - negated - {"--help"})
        problems += [f"amp-suite {name} {option}: not in the command list" for option in missing]
    return problems


def test_the_command_list_names_every_command_and_each_of_its_options():
    text = (REPO / "docs" / "matrices.md").read_text()
    assert command_list_problems(FENCE.search(text).group(1)) == []
    short = command_list_problems("amp-suite run --matrix PATH\n")
    assert "amp-suite predict: not in the command list" in short
    assert "amp-suite run --out: not in the command list" in short
