"""Privacy: erasing a user's data (:mod:`.erasure`) from savers, stores and the thread index."""
