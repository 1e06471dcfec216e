"""The typed FastAPI dependencies the admin routes take as parameters.

``f: Facade`` is the broker facade the app serves; ``who: User`` (``Monitor``, ``Policymaker``,
``Admin``) the authenticated caller with at least that right; ``slicer: Heavy`` a turn at
building a big answer in slices between loop turns.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from sievemq.admin_api.auth import admin, facade_of, monitor, policymaker, user
from sievemq.admin_api.slicing import Slicer, heavy
from sievemq.gateway.admin.facade import BrokerFacade
from sievemq.gateway.admin.views import Principal

Facade = Annotated[BrokerFacade, Depends(facade_of)]
User = Annotated[Principal, Depends(user)]
Monitor = Annotated[Principal, Depends(monitor)]
Policymaker = Annotated[Principal, Depends(policymaker)]
Admin = Annotated[Principal, Depends(admin)]
Heavy = Annotated[Slicer, Depends(heavy)]
