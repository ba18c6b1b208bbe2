"""The one error a bad parameter raises, before any work, everywhere in the library."""


class ParameterError(ValueError):
    """A study or library parameter outside its allowed values (raised before any work)."""
