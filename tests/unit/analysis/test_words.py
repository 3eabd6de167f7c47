"""The words of the summary's quantities have one source (analysis.words): change a parity verdict's
words there and every surface follows (issue 54): the terminal's table, the report's Markdown and
HTML, the MLflow run's description, the answer, the run's closing problems and the claims' reasons."""

from __future__ import annotations

import pytest
from support.fixture_records import A100, CPU, MLP, records, three
from support.surfaces import surfaces

from amp_suite.analysis import words
from amp_suite.analysis.outcome import judge
from amp_suite.analysis.quantities import INDICATIVE, PASS
from amp_suite.analysis.summary import summarize
from amp_suite.config import Expectation
from amp_suite.report import build_report


def test_a_verdicts_words_changed_at_their_source_change_on_every_surface(monkeypatch):
    made = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1900.0)})  # three seeds: a t-test's pass
    before = surfaces(made)
    worded = ("terminal", "markdown", "html", "mlflow")  # the answer and the diagnostics' numbers say no verdict here
    assert all("pass (" in before[name] or "pass +" in before[name] for name in worded)
    monkeypatch.setitem(words.PARITY_WORDS, PASS, "holds")
    after = surfaces(made)
    assert "] holds +" not in after["terminal"] and "holds +" in after["terminal"]
    assert "| 0.9, holds (p" in after["markdown"] and "holds (+" in after["markdown"]
    assert '<td class="pass">holds (+' in after["html"]  # its words changed, its verdict (and colour) did not
    assert "parity holds (+" in after["mlflow"]
    assert not any("pass (" in shown or "pass +" in shown for shown in after.values())


def test_a_one_seed_verdicts_words_and_its_flag_follow_too(monkeypatch):
    beyond = records(CPU, MLP, {"fp32": [(1000.0, 0.881)], "bf16": [(1300.0, 0.819)]})  # beyond the margin
    within = records(A100, MLP, {"fp32": [(1000.0, 0.881)], "bf16": [(1900.0, 0.880)]})
    monkeypatch.setitem(words.PARITY_WORDS, INDICATIVE, "one seed's word")
    monkeypatch.setattr(words, "AT_RISK_FLAG", "watch:")
    flagged = surfaces(beyond)
    assert "watch: one seed's word -0.062 / 0.0176" in flagged["terminal"]
    assert "| watch: one seed's word (-0.062 / 0.0176) |" in flagged["markdown"]
    assert '<td class="at-risk">watch: one seed&#39;s word (-0.062 / 0.0176)</td>' in flagged["html"]
    assert "parity watch: one seed's word (-0.062 / 0.0176)" in flagged["mlflow"]
    kept = surfaces(within)["answer"]
    assert "accuracy kept on one seed (one seed's word: run more seeds for a verdict)" in kept
    assert "indicative" not in kept + flagged["terminal"] + flagged["markdown"] + flagged["mlflow"]


@pytest.mark.parametrize("verdict", list(words.PARITY_WORDS))
def test_every_parity_verdict_has_its_words(verdict):
    assert words.PARITY_WORDS[verdict]


def test_the_exit_reasons_and_the_claims_word_verdicts_from_the_same_source(monkeypatch):
    """The run's closing problems (analysis.outcome) and the bf16 claim's reason name verdicts too."""

    one_seed = records(A100, MLP, {"fp32": [(1000.0, 0.881)], "bf16": [(1900.0, 0.880)]})
    monkeypatch.setitem(words.PARITY_WORDS, INDICATIVE, "one seed's word")
    monkeypatch.setitem(words.PARITY_WORDS, PASS, "holds")
    expected_pass = [Expectation(precision="bf16", parity="pass")]
    (problem,) = judge(one_seed, summarize(one_seed), expected_pass).problems
    assert problem.endswith("parity one seed's word (expected holds)"), problem
    claims = build_report(one_seed, []).claims
    assert any("only one seed's word verdicts" in claim.evidence for claim in claims), claims
