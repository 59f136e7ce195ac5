-- lib/fair_keys.lua: the fair queue's keys, one local each, in the order fair_router.core.keys.FairQueueKeys
-- declares its fields (FairQueueKeys.all_for_scripts passes them in that order; tests/test_lua_files.py
-- checks the two agree). A fair script calls bind_keys() first: the pieces it includes read these locals.
-- Bound per call rather than where they are declared, so that the same text serves a Redis function
-- library, whose pieces are defined once and whose calls each bring their own KEYS.
local rq_list, members, active, kept, parked, state, inflight, wake, costs, charged, runtimes, limits, claims,
  claimed, orgs
local function bind_keys()
  rq_list = KEYS[1]
  members = KEYS[2]
  active = KEYS[3]
  kept = KEYS[4]
  parked = KEYS[5]
  state = KEYS[6]
  inflight = KEYS[7]
  wake = KEYS[8]
  costs = KEYS[9]
  charged = KEYS[10]
  runtimes = KEYS[11]
  limits = KEYS[12]
  claims = KEYS[13]
  claimed = KEYS[14]
  orgs = KEYS[15]
end
