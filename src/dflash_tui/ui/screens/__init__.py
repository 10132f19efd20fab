"""The screens pushed over the run view: the fleet (the home with several profiles), a profile's
history, its timeline, and the dialogs (confirm, relaunch, profile picker, help)."""
