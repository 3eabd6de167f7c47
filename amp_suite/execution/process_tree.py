"""Every process a run starts ends with it: cells, what the user's code forks, the forkserver and
multiprocessing's resource tracker. Linux; elsewhere these do what they can and no more. No torch here.

Why it takes more than stopping the cells. A user's model is untrusted code: its build() can fork a
child that sleeps forever, or a daemon that leaves with setsid(). Such a child holds every file the
cell had open: the cell's record pipe, so the parent never sees its end; the forkserver's "alive"
pipe, which multiprocessing hands every cell, so the forkserver never exits; and the resource
tracker's pipe, so the tracker never exits either. Each cell therefore leads a process group of its
own and is a child subreaper (orphans of its code are re-parented to it, not to init): the cell
ends its descendants before it exits, and the parent, itself a subreaper for the run, ends each
cell's group after it and every process left under it when the run ends or stops.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import resource_tracker
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")


def become_subreaper() -> None:
    """Orphans of this process's descendants are re-parented to it (not to init), so that
    `descendants()` still finds them, and they can be ended."""
    if LINUX:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def lead_own_group() -> None:
    """This process leads a process group of its own: its children join it, and one signal to
    the group reaches them all (a double-forked daemon that calls setsid leaves; see `descendants`)."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # already a group leader (a session leader can't change its group)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` in the process tree, parents before their children."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        parent = _parent_of(stat)
        if parent is not None:
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for parent in frontier for child in children.get(parent, ()) if child not in found]
        found += frontier
    return found


def _parent_of(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])  # the command may hold spaces and parentheses
    except (OSError, IndexError, ValueError):
        return None  # it ended while we looked


def signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            pass  # already gone


def signal_group(leader: int, signum: int) -> None:
    """`signum` to the process group `leader` leads, if it still has members."""
    try:
        os.killpg(leader, signum)
    except OSError:
        pass  # no such group: every member has ended


@contextmanager
def ending_run_processes() -> Iterator[None]:
    """`amp-suite run`: within, this process adopts the orphans of every process below it (the
    entry check's, the cells' code's); after, however it is left, every one of them has ended."""
    become_subreaper()
    try:
        yield
    finally:
        end_run_processes()


def end_run_processes(grace_s: float = 5.0) -> None:
    """Every process below this one ends (cells and what their code left, adopted or not, the
    forkserver), then the resource tracker, by the end of its pipe: once nothing else holds it, it
    releases what the cells left registered and exits (killed after `grace_s` if something still does)."""
    end_descendants(grace_s)
    tracker = resource_tracker._resource_tracker
    if tracker._fd is None or tracker._pid is None:
        return
    os.close(tracker._fd)
    tracker._fd = None
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _running(tracker._pid):
        time.sleep(0.02)
    signal_all([tracker._pid], signal.SIGKILL)  # a no-op once it has exited
    _reap_adopted()
    tracker._pid = None


def end_descendants(grace_s: float = 0.0) -> None:
    """Every process below this one but the resource tracker: SIGTERM (and SIGCONT: a paused one
    can't act on it), `grace_s` to exit, then SIGKILL; the children it adopted are reaped. A cell
    calls it as it leaves; a second stop signal, on the run."""
    spared = {resource_tracker._resource_tracker._pid} - {None}
    below = [pid for pid in descendants(os.getpid()) if pid not in spared]
    if grace_s > 0 and below:
        signal_all(below, signal.SIGTERM)
        signal_all(below, signal.SIGCONT)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_running(pid) for pid in below):
            time.sleep(0.05)
    signal_all([pid for pid in descendants(os.getpid()) if pid not in spared], signal.SIGKILL)
    _reap_adopted(spared)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _reap_adopted(spared: frozenset[int] | set[int] = frozenset()) -> None:
    """Collect the exit status of every child that has ended, so none lingers as a zombie (the
    `spared` are another's to wait for)."""
    for pid in descendants(os.getpid()):
        if pid in spared:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not our child (a grandchild), or already collected
