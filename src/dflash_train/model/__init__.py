"""The frozen target LM and the DFlash drafter."""
