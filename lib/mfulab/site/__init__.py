"""The course as a book per machine (Sphinx + MyST-NB), and make lab's read-only results/."""
