"""Report sections of the fault classes added after the first wave, one module per class (network,
PCIe, GPUs, pages, capacity, OS, heat, CXL). They build on checker/report_types.py only; checker/schemas.py
puts them into Observations.
"""
