"""Running the course: the runner (papermill, ``make all`` and its time summary), stability
runs, check-gpu/node, the command line, provenance. Nothing below imports this package; the
notebooks' first cell is ``studykit.notebook``, so a change here re-runs no study."""
