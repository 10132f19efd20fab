"""dflash-tui: launch a training run on a GPU box, verified, and watch it live.

Headless library (nvitop's `api/` in spirit): `remote/` (where commands run), `run/` (one
run: launch, stop, read, judge), `gpu/` (GPU samples). `ui/` is the Textual app on top; the
`--check` CLI mode uses the library alone. Nothing under this package imports torch.
"""

__version__ = "0.1.0"
