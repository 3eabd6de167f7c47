"""`amp-suite report`: records of one or many machines -> tables, figures, references, claims.

No torch here: a report runs anywhere the records are (a laptop, CI, the MLflow host).
"""

from amp_suite.report.build import Report, build_report
from amp_suite.report.references import load_references

__all__ = ["Report", "build_report", "load_references", "make_report"]


def make_report(records, references, baseline, sources, unreadable, out, formats, estimated=(), conclusion=None):
    """Build, draw and write a report; returns it and the paths written. `estimated`: the sources'
    estimates against their measurements (`amp-suite predict --results`), where they have them;
    `conclusion`: the records' own (analysis.conclusion), where the caller worked it out already."""
    from amp_suite.report.figures import draw_figures
    from amp_suite.report.render import write_report

    report = build_report(records, references, baseline, sources, unreadable, estimated, conclusion)
    figures = draw_figures(report, records) if {"html", "md"} & set(formats) else []
    return report, write_report(report, figures, out, formats)
