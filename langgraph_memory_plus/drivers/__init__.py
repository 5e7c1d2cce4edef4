"""The lowest layer: how plans reach a server, shared by every saver and store.

The plan protocol (:mod:`.plan`) and the sync/async bridge (:mod:`.bridge`); the
PostgreSQL, Redis and SQLite runners (:mod:`.postgres`, :mod:`.redis`, :mod:`.sqlite`) and
the driver mixins over them (:mod:`.pgdriver`, :mod:`.redisdriver`); connections
(:mod:`.connect`, :mod:`.closing`, :mod:`.options`), PostgreSQL migrations
(:mod:`.migrations`), and URL checks and redaction (:mod:`.urls`). Nothing here imports
a saver, a store or anything above them.
"""
