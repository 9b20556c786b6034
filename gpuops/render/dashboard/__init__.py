"""`gpuops dashboard`'s page: the template, the vendored chart library and the page script (page.py renders what it is given)."""
