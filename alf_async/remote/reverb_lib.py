"""Loading the optional Reverb engine."""


def import_reverb():
    """The `reverb` module, or an ImportError that says which extra to install."""
    try:
        import reverb  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ImportError("remote actors need dm-reverb: pip install -e '.[distributed]'"
                          ) from None
    return reverb
