-- fair_recount.lua: tenants' waiting counts checked against rq's list (lib/recount.lua) before a backlog cap's
-- pre-check refuses them (controls/backlog.py), so jobs rq removed behind our back never count.
-- include: fair_keys, recount
-- KEYS     keys.FairQueueKeys, in field order.
-- ARGV     tenants (encoded).
-- Returns  each tenant's waiting count, in ARGV order (a count that could not be verified is returned as it was).
bind_keys()
local counts = {}
for i = 1, #ARGV do
  counts[i] = (recount(ARGV[i]))
end
return counts
