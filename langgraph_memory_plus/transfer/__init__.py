"""Transfer: copying and verifying threads and store items between any two savers / stores
(:mod:`.migration`)."""
