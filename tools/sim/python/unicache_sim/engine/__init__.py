"""The engine: the machine from a topology (config) and the tools' compute costs (calibration)."""
