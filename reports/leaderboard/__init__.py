"""The leaderboard: finished MLflow runs -> tables (Markdown, CSV, HTML) and plots, with the paper side by side.

Runs are grouped by (data set, preset, model, method, epsilon, q, T); seeds are aggregated (mean +- std of test
accuracy). Audit runs (tag ``kind = audit``) give measured epsilon lower bounds under two threat models: black-box
(the adversary sees predictions only) and white-box (the released parameters, and their initial values); each
leaderboard row shows the strongest of each over every audit of the same claim whose neighbouring pairs follow the
claim's relation, and a verdict against the claim.

One job per module: ``load`` (the store's runs as rows; runs logged before a tag existed are read there alone),
``board`` (one row per recipe and budget, times), ``verdicts`` (audits into verdicts), ``answer`` (the best sound
row per data set, relation and epsilon), ``tables`` (what a reader sees), ``published`` (the literature beside it),
``render`` (the files).
"""

from inputdp.benchmarks.audits.one_run import BLACK_BOX

from .answer import answer_table
from .board import leaderboard, speed_ratios
from .load import GROUP, load_runs, tidy
from .published import paper_results, paper_side_by_side
from .reading import NO_GUARANTEE, REFERENCE, SOUND, covers_model, short_verdict
from .render import ReportFiles, write_audit_report, write_report
from .tables import display_table, to_markdown
from .verdicts import audit_table

__all__ = ["BLACK_BOX", "GROUP", "NO_GUARANTEE", "REFERENCE", "SOUND", "ReportFiles", "answer_table", "audit_table",
           "covers_model", "display_table", "leaderboard", "load_runs", "paper_results", "paper_side_by_side",
           "short_verdict", "speed_ratios", "tidy", "to_markdown", "write_audit_report", "write_report"]
