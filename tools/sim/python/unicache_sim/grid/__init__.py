"""The grid: the MFC experiment over every multi-LLC model and axis, on Dask; store and report."""
