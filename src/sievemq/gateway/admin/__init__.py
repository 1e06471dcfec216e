"""Typed read views and commands over the broker, by resource: what the admin plane may use.

``BrokerFacade`` (``admin.facade``) composes the sections: ``queues``, ``topology``
(exchanges, bindings, publish), ``connections``, ``consumers``, ``access`` (vhosts, users,
permissions, limits), ``policies`` (and runtime parameters), ``browse`` (bounded reads of the
stream files, filter advice), ``offsets`` (named consumers), ``definitions``, ``overview``
and ``sampling`` (the rates); ``views`` holds the dataclasses they answer with and the errors
they raise. ``admin_api`` imports ``views`` and ``facade`` only.

Everything here runs on the event loop and never blocks on the network. Reading messages
(``browse``) reads the stream files with ``pread`` under a time budget and a byte cap.
"""
