"""Notifications: events from the status projection, sent once to Apprise URLs.

``config`` holds the targets (``notify.json``, 0600: the URLs hold secrets),
``events`` derives what happened from two projections (pure), ``outbox``
records what is to be sent and what was (``notify.d/outbox.json``), and
``deliver`` sends it (Apprise, imported only to send) with retries.
"""
