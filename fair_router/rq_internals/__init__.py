"""Every rq member that is not public API, in one package (each, and what breaks if rq changes it: compatibility.md)."""
