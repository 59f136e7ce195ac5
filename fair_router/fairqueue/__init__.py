"""FairQueue: weighted fair share across tenants inside one rq queue."""
