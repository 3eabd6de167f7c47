"""Data-parallel (DDP) cells: launched with PyTorch's elastic launcher, one process per rank.

launch.py runs in the cell's process (it is the elastic agent) and turns the ranks' files into
record fields; rank.py is what each rank runs. Summaries of DDP records (scaling efficiency,
hook parity) live with the others in amp_suite.analysis.summary, without torch.
"""
