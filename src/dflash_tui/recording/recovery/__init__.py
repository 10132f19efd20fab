"""Recovery: the pure decision (recover_policy.py), the one actor (recovery.py), its log
(recovery_log.py), where it stands (recovery_state.py), a person's stop (stop_cancel.py), the
bundles taken before it acts (bundles.py), and what `--check`/`--bundle` read of all that
(outside.py). Above the store, the notifications and the goodput."""
