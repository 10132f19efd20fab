"""Notifications: which changes notify and their words (notify.py), the Apprise sender off the
poll loop (sender.py), what of a URL may be printed (redact.py). Above the store."""
