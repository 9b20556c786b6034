"""Renderers: tables, the one emitter, progress, the `up` reporter, one renderer per report, the dashboard page."""
