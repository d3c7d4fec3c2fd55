"""The observations paper's experiments: OBS-X, OBS-L and OBS-C against a Linux-like scheduler."""
