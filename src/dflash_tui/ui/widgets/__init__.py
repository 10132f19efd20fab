"""Widgets the panes and screens build on: RowTable (repaints only changed rows) and the
OnScreenOnly mixin (draws only while shown)."""
