"""The fair queue: an rq Queue whose jobs are served by weighted fair share across tenants, FIFO within a
tenant (docs/fair-queue.md says how). Importing the package runs none of its modules."""
