"""The DMC paper's microbenchmarks (§6, Figures 3-5) and SCU on DMC hardware, a what-if."""
