"""The SRM paper's experiments: the SRM-buffer of §2 (Figures 1-2) and the §4 cases."""
