"""The MFC paper's experiments (§6.1-§6.3, §4.6's co-runners), and the scheduler hop."""
