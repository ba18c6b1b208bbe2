"""Running the course: the runner (papermill), stability runs, check-gpu/node, the notebooks' first
cell, the command line, provenance."""
