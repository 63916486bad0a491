"""``posttrain view``: a local web page over run directories — every metric's curves, runs side
by side; an episode browser with each sampled token coloured by its log-prob; a group's
samples side by side (docs/viewer.md)."""

from posttrain.viewer.app import create_viewer_app
from posttrain.viewer.runs import runs_under

__all__ = ["create_viewer_app", "runs_under"]
