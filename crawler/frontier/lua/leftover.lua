-- What each host with queued URLs is waiting for, and until when; asked to
-- (repair), put back a host that waits for nothing (the watchdog).
--
-- The liveness invariant (docs/architecture.md): a host with queued URLs is
-- in its partition's ready set (scored by when it may go next), or waits in
-- a set that a timer looks at again (its registered domain's :dw: with the
-- domain in :dwake, its server address's :iw: with the address in :iwake),
-- or its site has as many leases in flight as its concurrency (each lease
-- runs out by itself), or an operator paused it. A host in none of these is
-- "lost": nothing would ever claim it. The scripts keep the invariant; this
-- reads it back, for the end-of-crawl summary, for the decision that only
-- held work is left, and for the watchdog's repair.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.leftover_args): repair
--          (true: repair lost hosts); grace_ms: wake now the hosts waiting for
--          a domain or an address whose time passed longer ago than that (the
--          watchdog, once the frontier has sat idle; 0: none)
-- then the host keys to look at (as many as the batch holds: positional)
-- Returns the server's time (ms), 1 if the partition's timer field was
-- repaired (else 0), then per host five values: state, until (ms; -1: until
-- an operator acts), detail, how many URLs it has queued, and for a host in a
-- run of failures the length of its current hold (ms; -1: not known), else 0.
-- States:
--   ready           may be claimed now
--   paced           its next turn (delay, Crawl-delay, adaptive pacing)
--   robots-job      its (or its site's) robots.txt is being fetched
--   dns-job         its name is being resolved (the IP scope)
--   dns             its lookups fail (a run not yet broken by an answer from the
--                   host: held, or between two tries; detail: kind, attempts)
--   breaker         its circuit breaker is open, or its probe is out (detail:
--                   openings, or "probe")
--   retry-after     the server asked us to wait (429, 503, Retry-After)
--   robots-unreachable  its robots.txt could not be fetched (held, or being
--                   tried again; detail: failed tries)
--   paused          an operator paused its site or domain (detail: which)
--   domain          waits for its registered domain (detail: the domain)
--   address         waits for its server address (detail: the address)
--   busy            its site has its concurrency in flight
--   dropped         dropped or parked (its URLs become dead letters)
--   lost            waits for nothing (repaired when asked: detail "repaired")
local p, a = ARGV[1], cjson.decode(ARGV[2])
local repair, grace = a.repair == true, num(a.grace_ms, 0)
local now = now_ms()
local leases_here = redis.call('ZCARD', p .. ':leased')
local out = {now, 0}
local queued = 0  -- of the host at hand

-- The partition's timer fields (common.lua, timer_at) must not be later than
-- the earliest entry of their timed sets, or no claim looks at them in time.
if repair then
  local mt = math.abs(num(redis.call('HGET', KEYS[1], N.timers), 0))
  local own = redis.call('HMGET', KEYS[1], unpack(TIMER_FIELDS))
  for j, set in ipairs(TIMED_SETS) do
    local first = redis.call('ZRANGE', p .. ':' .. set, 0, 0, 'WITHSCORES')
    local at = #first > 0 and tonumber(first[2])
    if at and at <= now and (at < mt or (own[j] and at < math.abs(num(own[j], 0)))) then
      -- no fields: the next claim looks at every set now
      redis.call('HDEL', KEYS[1], N.timers, unpack(TIMER_FIELDS))
      out[2] = 1
      break
    end
  end
end

local function put(state, until_ms, detail, hold_ms)
  out[#out + 1] = state
  out[#out + 1] = until_ms
  out[#out + 1] = detail or ''
  out[#out + 1] = queued
  out[#out + 1] = hold_ms or 0
end

-- A host in the middle of a run of failures is held by that run, whatever
-- it is doing now (between two lookups, its next robots.txt try, its
-- breaker's probe, waiting for its domain or its address): its state says
-- so, so that a crawl whose only work left is such hosts is seen to be
-- held, not busy, at any moment. The run's state, detail and hold length,
-- or nil when it is in none.
local function run_of_failures(g, h)
  if g[S.dns_failures] then
    local detail = (g[S.dns_kind] or 'servfail') .. ' ' .. num(g[S.dns_failures], 0)
    return 'dns', detail, num(g[S.dns_hold], -1)
  elseif g[S.breaker] == 'o' then
    return 'breaker', tostring(num(g[S.openings], 1)), num(g[S.cooldown], -1)
  elseif g[S.breaker] == 'h' then
    return 'breaker', 'probe', num(g[S.cooldown], -1)
  elseif num(h[H.robots_tries], 0) > 0 and h[H.robots_state] ~= 'k' then
    return 'robots-unreachable', tostring(num(h[H.robots_tries], 0)), num(h[H.robots_retry], -1)
  end
  return nil
end

-- Why a host in the ready set waits, or that it has nothing to wait for
-- (ready); one in a run of failures is held by it.
local function why_late(score, g, h)
  local run, detail, hold = run_of_failures(g, h)
  if run then return put(run, score, detail, hold) end
  if score <= now then return put('ready', score) end
  local w, rw = num(g[S.held], 0), num(h[H.robots_wait], 0)
  local rj, dj = num(g[S.robots_job], 0), num(g[S.dns_job], 0)
  if w >= score then return put('retry-after', score) end
  if rw >= score or rj >= score then return put('robots-job', score) end
  if dj >= score then return put('dns-job', score) end
  put('paced', score)
end

-- A host waiting for its domain or its address while in a run of failures:
-- the state just put at out[n + 1] becomes the run's, its time kept, once
-- the wait's own repairs are done. A lost one stays lost.
local function held_by_run(n, g, h)
  local run, detail, hold = run_of_failures(g, h)
  if run and out[n + 1] ~= 'lost' then
    out[n + 1], out[n + 3], out[n + 5] = run, detail, hold
  end
end

local function wait_for_domain(dom)
  local d = record(p .. ':d:' .. dom, {D.ctl_paused})
  if d[D.ctl_paused] then return put('paused', -1, 'domain ' .. dom) end
  local at = redis.call('ZSCORE', p .. ':dwake', dom)
  if not at or (grace > 0 and num(at, 0) < now - grace) then
    if repair or grace > 0 then
      redis.call('ZREM', p .. ':dwake', dom)
      forget_domain_wake(dom)
      wake_domain(p, dom, now)
      return put('domain', now, dom .. ' (woken)')
    end
    if not at then return put('lost', -1, 'domain ' .. dom .. ' has no wake') end
  end
  put('domain', num(at, now), dom)
end

local function wait_for_address(host, addr, score)
  local at = redis.call('ZSCORE', p .. ':iwake', addr)
  if grace > 0 and num(score, 0) < now - grace then
    -- its own time came and went: look at its address again now (claim.lua step 5)
    redis.call('ZADD', p .. ':iw:' .. addr, now, host)
    redis.call('ZADD', p .. ':iwake', now, addr)
    timer_at(p, now, 'iwake')
    return put('address', now, addr .. ' (woken)')
  end
  if not at or num(at, 0) > num(score, 0) then
    if not repair then return put('lost', -1, 'address ' .. addr .. ' has no wake') end
    redis.call('ZADD', p .. ':iwake', num(score, now), addr)
    timer_at(p, num(score, now), 'iwake')
    return put('address', num(score, now), addr .. ' (woken)')
  end
  put('address', num(score, 0), addr)
end

for i = 3, #ARGV do
  local host = ARGV[i]
  local hk, sk = p .. ':h:' .. host, site_key(p, host)
  queued = redis.call('ZCARD', p .. ':q:' .. host)
  local h = record(hk, {H.queued, H.robots_wait, H.robots_state, H.robots_tries, H.robots_retry,
                        H.blocked})
  local g = record(sk, {S.in_flight, S.concurrency, S.next_claim, S.held, S.robots_job,
                        S.ctl_concurrency, S.ctl_paused, S.floor, S.delay, S.adaptive,
                        S.first_answer, S.dns_job, S.dns_until, S.dns_failures, S.dns_kind,
                        S.dns_hold, S.breaker, S.openings, S.cooldown, S.domain, S.address})
  local score = redis.call('ZSCORE', p .. ':ready', host)
  local dom = g[S.domain]
  local addr = g[S.address]
  local parked_at = addr and redis.call('ZSCORE', p .. ':iw:' .. addr, host)
  if queued == 0 then
    put('empty', 0)
  elseif h[H.blocked] == '1' or h[H.blocked] == 'p' then
    put('dropped', -1, h[H.blocked] == 'p' and 'parked' or 'dropped')
  elseif g[S.ctl_paused] then
    put('paused', -1, 'site')
  elseif parked_at then
    local n = #out
    wait_for_address(host, addr, parked_at)
    held_by_run(n, g, h)
  elseif score then
    why_late(tonumber(score), g, h)
  elseif dom and redis.call('ZSCORE', p .. ':dw:' .. dom, host) then
    local n = #out
    wait_for_domain(dom)
    held_by_run(n, g, h)
  elseif num(g[S.in_flight], 0) >= site_concurrency(g) and leases_here > 0 then
    put('busy', 0)
  elseif num(g[S.in_flight], 0) > 0 and leases_here > 0 and (h[H.robots_state] ~= 'k') then
    put('busy', 0)  -- its robots.txt waits until nothing of the site is in flight
  elseif repair then
    -- Lost: its count of queued URLs or its site's count in flight went
    -- wrong (a partition with no lease has none in flight), or a wake was
    -- missed. Set both from the truth and put it where it belongs.
    redis.call('HSET', hk, H.queued, queued)
    if leases_here == 0 then redis.call('HSET', sk, S.in_flight, 0) end
    redis.call('HDEL', hk, H.woken)
    refresh_site(p, host)
    local again = redis.call('ZSCORE', p .. ':ready', host)
    put('lost', again and tonumber(again) or -1, 'repaired')
  else
    put('lost', -1, '')
  end
end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return out
