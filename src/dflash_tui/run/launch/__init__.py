"""Starting and stopping a run: preflight, the launch claim, the probe, launch, the verified stop, the canary; the Launcher seam."""
