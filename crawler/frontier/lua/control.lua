-- Live control: an operator's override of one site's, domain's or server
-- address's limits
-- (`scrapy frontier host`), in force for every worker from their next claim
-- or start, and until it is reset. The overrides are fields of the record
-- (xc concurrency, xd delay ms, xp paused: common.lua reads them), so they
-- survive restarts and leave the automatic values (settings, robots.txt,
-- holds) untouched underneath.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition), or
--          for an address its gate hash ({ns/ip/ADDR}:g, a slot of its own)
-- ARGV[1]  prefix
-- ARGV[2]  the change, a JSON object by name (scriptargs.control_args): scope
--          "site", "domain" or "ip"; name, the site's name, the domain or the
--          address; reset (true: every override off first); concurrency,
--          delay_ms; pause (true pause, false resume); budget_pages,
--          budget_bytes, budget_ms, a site's budget (common.lua budget_left;
--          0: no limit). A value left out is left as it is. A site whose
--          budget this changes takes new links again (its hosts' "q" mark
--          goes: admit.lua); its dead letters wait for a requeue.
-- Returns 1, or 0 when the frontier has no such site.
local p = ARGV[1]
local a = cjson.decode(ARGV[2])
local scope, name = a.scope, a.name
local key = p .. (scope == 'site' and ':g:' or ':d:') .. name
if scope == 'ip' then key = KEYS[1] end
-- The fields of the record changed: a site's, a domain's or an address's
-- gate (an address's gate has no next claim).
local R
if scope == 'site' then
  R = {ctl_concurrency = S.ctl_concurrency, ctl_delay = S.ctl_delay, ctl_paused = S.ctl_paused,
       next_claim = S.next_claim, next_start = S.next_start}
elseif scope == 'domain' then
  R = {ctl_concurrency = D.ctl_concurrency, ctl_delay = D.ctl_delay, ctl_paused = D.ctl_paused,
       next_claim = D.next_claim, next_start = D.next_start}
else
  R = {ctl_concurrency = IG.ctl_concurrency, ctl_delay = IG.ctl_delay,
       ctl_paused = IG.ctl_paused, next_start = IG.next_start}
end
if scope == 'site' and redis.call('EXISTS', key) == 0 then return 0 end
local now = now_ms()

if a.reset then
  redis.call('HDEL', key, R.ctl_concurrency, R.ctl_delay, R.ctl_paused, S.budget_pages,
             S.budget_bytes, S.budget_ms)
end
local function set(field, value)
  if value ~= nil then redis.call('HSET', key, field, value) end
end
set(R.ctl_concurrency, a.concurrency)
set(R.ctl_delay, a.delay_ms)
set(S.budget_pages, a.budget_pages)
set(S.budget_bytes, a.budget_bytes)
set(S.budget_ms, a.budget_ms)
local budget = a.budget_pages ~= nil or a.budget_bytes ~= nil or a.budget_ms ~= nil
if scope == 'site' and (budget or a.reset) then
  redis.call('HDEL', key, S.budget_job)
  for _, host in ipairs(redis.call('SMEMBERS', p .. ':ga:' .. name)) do
    local hk = p .. ':h:' .. host
    if redis.call('HGET', hk, H.blocked) == 'q' then
      redis.call('HDEL', hk, H.blocked, H.parked_reason)
    end
  end
end
if a.pause == true then
  redis.call('HSET', key, R.ctl_paused, 1)
elseif a.pause == false then
  redis.call('HDEL', key, R.ctl_paused)
end

-- A shorter delay applies now, not after the turn the longer one gave out.
local delay = tonumber(a.delay_ms)
if delay then
  -- (an address's gate has no next claim: R.next_claim is nil there)
  local st = redis.call('HMGET', key, R.next_claim or R.next_start, R.next_start)
  if R.next_claim and num(st[1], 0) > now + delay then
    redis.call('HSET', key, R.next_claim, now + delay)
  end
  if num(st[2], 0) > now + delay then redis.call('HSET', key, R.next_start, now + delay) end
end

if scope == 'site' then
  refresh_site(p, name)
elseif scope == 'domain' then
  -- a site alone in the domain is gated by the domain from now on
  local alone = redis.call('HGET', key, D.first_site)
  if alone then redis.call('HDEL', p .. ':g:' .. alone, S.alone) end
  wake_domain(p, name, now)
elseif redis.call('HLEN', key) > 0 then
  -- An address's gate is forgotten after an hour unused (ipgate.lua), but not
  -- while an operator's override is on it. Its parked hosts are woken by the
  -- caller (control.py), in their partitions.
  if redis.call('HEXISTS', key, IG.ctl_concurrency) + redis.call('HEXISTS', key, IG.ctl_delay)
      + redis.call('HEXISTS', key, IG.ctl_paused) > 0 then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIRE', key, 3600000)
  end
end
if scope ~= 'ip' then wake_sleepers(p) end  -- (common.lua: workers waiting here)
return 1
