"""`python -m finetune bench`: training throughput of the seed recipe against TuneDesk's.

``grid`` is the parent side (settings, the grid of points, one fresh process per row, the
model-FLOPs formula); ``recipes`` is the child side (build a row's model, run the seed or the
TuneDesk loop, ``run_one``); ``measure`` holds the instruments (token counters, timing window,
matmul rate); ``report`` writes CSV, markdown and plot; ``maxbatch`` finds the largest CUDA
micro-batch. Dependencies go one way: recipes -> grid, measure; report -> grid.
"""
