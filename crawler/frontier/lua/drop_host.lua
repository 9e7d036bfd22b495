-- Drop a host: its queued (and given delayed) URLs become dead letters, and
-- the host is blocked (field b = 1): admit.lua refuses its new URLs until
-- requeue.lua brings any of its dead letters back.
-- (common.lua is prepended: split_fields, refresh_host.)
--
-- Called repeatedly until it returns no more queued URLs: each call moves at
-- most max URLs, so a host with a huge queue never holds Redis (and every
-- worker) for long, and each call is atomic, so the counts always agree with
-- the queues. URLs in flight are left to their workers; the dead letters keep
-- their entries, so `scrapy frontier requeue --reason dropped` undoes a drop.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.drop_host_args): host,
--          the host key; reason, the dead reason (JSON text); max, how many
--          queued URLs to move at most in this call; mark, what to set the
--          host's b field to: "1" blocks it (an operator's drop: new links
--          refused), "p" parks it (robots.txt unreachable: new links become
--          dead letters too), "q" ends a spent budget (new links refused, as
--          for "1", but counted apart), left out: left as it is
-- then fingerprints of the host's delayed URLs to drop too (binary, as many
-- as there are: positional; the client finds them, each is checked here to
-- be still delayed and of this host)
-- Returns {queued moved, delayed moved, still queued}.
local p, a = ARGV[1], cjson.decode(ARGV[2])
local host, reason, max = a.host, a.reason, a.max
local mark = a.mark or ''
local hk, qk = p .. ':h:' .. host, p .. ':q:' .. host
if redis.call('EXISTS', hk) == 0 then return {0, 0, 0} end
-- Hosts parked are counted by their reason's label (N.parked_by; requeue.lua
-- takes one off when it brings a parked host back): the crawl's account.
local was = redis.call('HMGET', hk, H.blocked, H.parked_reason)
if was[1] == 'p' and mark ~= '' and mark ~= 'p' then
  hincr(KEYS[1], N.parked_by .. reason_label(was[2] or ''), -1)
end
if mark ~= '' then redis.call('HSET', hk, H.blocked, mark) end
if mark == 'p' then
  if was[1] ~= 'p' then hincr(KEYS[1], N.parked_by .. reason_label(reason), 1) end
  redis.call('HSET', hk, H.parked_reason, reason)
  -- Parked by the worker that met its end (a name that does not exist, a
  -- robots.txt given up): a robots job of the host is over, and no longer
  -- counts against its registered domain.
  domain_lease_ended(p, site_key(p, host), 'R' .. host, now_ms())
end

local popped = redis.call('ZPOPMIN', qk, max)
local queued = #popped / 2
for i = 1, #popped, 2 do
  local entry = popped[i]
  dead_letter(KEYS[1], p, string.sub(entry, 1, 16), host, reason, entry)
end

local delayed = 0
local tag = host .. '\n'
for i = 3, #ARGV do
  local fp = ARGV[i]
  local data = redis.call('HGET', p .. ':dd', fp)
  if data and string.sub(data, 1, #tag) == tag then
    local _, _, entry = split_fields(data, 3)  -- host \n score \n entry
    redis.call('ZREM', p .. ':delayed', fp)
    redis.call('HDEL', p .. ':dd', fp)
    dead_letter(KEYS[1], p, fp, host, reason, entry)
    delayed = delayed + 1
  end
end

-- The queue length is the truth for n; a host with nothing queued is not ready.
local left = redis.call('ZCARD', qk)
redis.call('HSET', hk, H.queued, left)
-- (a budget job is over once its queue is: claim.lua's bj)
if mark == 'q' and left == 0 then redis.call('HDEL', site_key(p, host), S.budget_job) end
if left == 0 then redis.call('DEL', p .. ':qm:' .. host) end  -- (admit.lua's inlinks)
refresh_host(p, host)

if queued > 0 then hincr(KEYS[1], N.queued, -queued) end
if delayed > 0 then hincr(KEYS[1], N.delayed, -delayed) end
if queued + delayed > 0 then hincr(KEYS[1], N.dead, queued + delayed) end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return {queued, delayed, left}
