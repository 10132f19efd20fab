"""The evidence bundle: one archive that carries a run's evidence to whoever must fix it.

Rooms, bottom to top: member (one member of the bundle, or what could not be taken and why),
clean (redaction and inertness: what may leave this machine), archive (the tar.gz with
manifest.json first, within the size bound), collect (what is taken, read through the same
look the verdict judges), take (all of it, within the time bound). bundle/README.md
has the format, the manifest and the redaction rules.
"""

from .take import BundleResult, default_bundle_path, take_bundle

__all__ = ["BundleResult", "default_bundle_path", "take_bundle"]
