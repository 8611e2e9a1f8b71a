"""Post-processing of ulysses-ipc run reports: summarize, compare and plot (docs/report.md)."""

from .report import Report, ReportError, load_report

__all__ = ["Report", "ReportError", "load_report"]
__version__ = "0.1.0"
