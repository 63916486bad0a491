"""What a run reports: ``metrics.jsonl`` and progress (``Reporter``), the ``report_to``
trackers (``tracking``), and plots of the metrics (``curves``: ``curves.png``, the run at a
glance, and ``curves_<stage>.png``, each stage in detail)."""

from posttrain.reporting.curves import curve_panels, plot_curves, plot_stages
from posttrain.reporting.reporter import Reporter, StepProgress
from posttrain.reporting.tracking import open_trackers

__all__ = ["Reporter", "StepProgress", "curve_panels", "open_trackers", "plot_curves",
           "plot_stages"]
