"""What predict builds a profile with (report.cell_profiles): each profile once, the mode whose ops
it runs; the libraries' notes to their own developers dropped around it, nothing else."""

from __future__ import annotations

import logging
import warnings

from conftest import tiny_matrix

from amp_suite.config import Matrix
from amp_suite.report.cell_profiles import LIBRARY_NOTES, Profiles, quiet_libraries

NOTE_LOGGER, NOTE = LIBRARY_NOTES[0]


def test_a_profile_is_made_once_per_cell_and_said_as_it_starts():
    said, made = [], []
    profiles = Profiles(said.append, profile=lambda spec: made.append(spec.precision) or object())
    cells = Matrix.model_validate(tiny_matrix()).cells("cpu")
    for spec in cells + cells:
        profiles.of(spec)
    assert sorted(made) == ["bf16", "fp16", "fp32"]  # tf32 runs fp32's ops
    assert len(said) == 3 and said[0] == "profiling tiny: mlp at batch 8 in fp32"
    quiet = Profiles(profile=lambda spec: object())
    quiet.of(cells[0])  # no one to tell: nothing said, nothing raised


def test_the_libraries_notes_are_dropped_and_nothing_else(caplog):
    logger = logging.getLogger(NOTE_LOGGER)
    with caplog.at_level(logging.WARNING, logger=NOTE_LOGGER), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning shows, but for the notes quiet_libraries drops
        with quiet_libraries():
            logger.warning("%s " + NOTE + " and is now natively supported", "<enum 'KernelPreference'>")
            logger.warning("something else went wrong")
            warnings.warn(f"X {NOTE} and is deprecated", DeprecationWarning, stacklevel=1)
            warnings.warn("another warning", UserWarning, stacklevel=1)
        logger.warning("after: %s " + NOTE, "<enum 'X'>")
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["something else went wrong", f"after: <enum 'X'> {NOTE}"], messages
    assert [str(w.message) for w in caught] == ["another warning"]
