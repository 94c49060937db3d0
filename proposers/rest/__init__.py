"""REST: drafts retrieved from a suffix-array datastore of text."""

from proposers.rest.datastore import Datastore, DatastoreSource
from proposers.rest.proposer import RestProposer

__all__ = ["Datastore", "DatastoreSource", "RestProposer"]
