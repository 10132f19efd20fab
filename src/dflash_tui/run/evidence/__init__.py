"""What a run did, read through RemoteOps: its files, records, processes, log progress, stacks and Flight Recorder dumps (Evidence)."""
