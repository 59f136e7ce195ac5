-- fair_forget.lua: a fair pop served a job that will not run: rq canceled or deleted it, and rq's
-- Job.cancel / Job.delete LREM its id from rq's list through a plain Queue. When that LREM took the job's
-- own token, the pop spent another waiting job's token on it: restore one, so that LLEN + held - stale
-- stays the backlog, and drop the id's token count, which would otherwise outlive the job and make a
-- later plain push of the same id (rq's CanceledJobRegistry.requeue) look like a token and be lost.
-- Only called for skipped jobs (rare), so the O(list) LPOS is affordable.
-- KEYS     the fair queue's keys, named in fair_common.lua (prepended at load).
-- ARGV     job_id, spent ('1' = the pop spent a token on it, listed or held: pop kind 2; '0' = it served the
--          job with no token left at all, kind 3, which already made up for one missing token)
-- Returns  how many tokens were restored.
local job_id, spent = ARGV[1], ARGV[2] == '1'

local counted = tonumber(redis.call('HGET', tokens, job_id) or '0')
if counted == 0 then return 0 end
local missing = counted - #redis.call('LPOS', rq_list, job_id, 'COUNT', 0)
if missing <= 0 then return 0 end
if missing == counted then
  redis.call('HDEL', tokens, job_id)
else
  redis.call('HINCRBY', tokens, job_id, -missing)
end
local restore = missing
if not spent then restore = missing - 1 end
return restore_tokens(restore)
