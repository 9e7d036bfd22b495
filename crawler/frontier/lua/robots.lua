-- Store the outcome of a host's robots.txt fetch, for every worker.
-- (common.lua is prepended: now_ms, refresh_host.)
--
-- claim.lua handed the host out as a robots job (rs = "f", held by rw). Here:
-- * "ok" (2xx rules, or 4xx "unavailable": allow all): the rules are stored
--   in PP:r (a blob the workers decode), cached until now + ttl; the host's
--   pacing (rc, rdl, rfl) becomes what the worker computed from the project's
--   settings and the file's Crawl-delay / Request-rate, and its site is paced
--   by the strictest of its hosts' files (pace_site); its version rv moves on so that
--   workers reload their in-process copy; the hold is lifted.
-- * "fail" (5xx, 429, timeout, network error: "unreachable"): attempt ra + 1;
--   the next try is after base * 2^(ra - 1) ms, or the Retry-After the
--   server sent if longer, capped. A last good copy no
--   older than stale_max ms keeps serving meanwhile (RFC 9309 2.4); without
--   one the host is held (complete disallow) and, after max_attempts, the
--   caller parks its queued URLs as dead letters.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] the rules' blob (binary: "" when unreachable)
-- ARGV[3]  the rest, a JSON object by name (scriptargs.robots_args): host;
--          outcome "ok" or "fail"; ttl_ms; concurrency, delay_ms and floor_ms (the
--          robots delay) its file asks for; first_gap_ms, the gap before the
--          first page; retry_base_ms, retry_cap_ms, max_attempts (0: no
--          parking), stale_max_ms; wait_ms, the shortest wait before the next
--          try (the answer's Retry-After; capped like the backoff)
-- Returns {state, attempts, version}: state "rules", "stale", "unreachable"
-- or "park".
local p, blob = ARGV[1], ARGV[2]
local a = cjson.decode(ARGV[3])
local host, outcome = a.host, a.outcome
local hk = p .. ':h:' .. host
local now = now_ms()
-- (every host record has n: none, the host is gone)
local hs = redis.call('HMGET', hk, H.queued, H.robots_version, H.robots_tries, H.robots_fetched)
if not hs[1] then return {'gone', 0, 0} end
local sk = site_key(p, host)
local SITE_READ = {S.domain, S.hosts, S.in_flight, S.concurrency, S.next_claim, S.held,
                   S.robots_job, S.ctl_concurrency, S.ctl_paused, S.floor, S.delay, S.adaptive,
                   S.first_answer, S.dns_job, S.next_start, S.budget_job}
local g = record(sk, SITE_READ)
-- The fetch no longer counts against the host's domain.
domain_lease_ended(p, sk, 'R' .. host, now, g[S.domain] or false)

-- The site (every authority of the name) is paced by the strictest of its
-- authorities' robots.txt files that are known: the smallest concurrency,
-- the longest delay and Crawl-delay floor. (w: the site's fields to write;
-- a site of one authority has this file's alone.)
local function pace_site(w, site)
  if g[S.hosts] == '1' then
    w[S.concurrency], w[S.delay], w[S.floor] = a.concurrency, a.delay_ms, a.floor_ms
    return
  end
  local c, dl, fl
  for _, h in ipairs(redis.call('SMEMBERS', p .. ':ga:' .. site)) do
    local st = redis.call('HMGET', p .. ':h:' .. h, H.robots_state, H.robots_concurrency,
                          H.robots_delay, H.robots_floor)
    if st[1] == 'k' and st[2] then
      local hc, hdl, hfl = tonumber(st[2]), tonumber(st[3]), tonumber(st[4])
      c = c and math.min(c, hc) or hc
      dl = dl and math.max(dl, hdl) or hdl
      fl = fl and math.max(fl, hfl) or hfl
    end
  end
  if c then w[S.concurrency], w[S.delay], w[S.floor] = c, dl, fl end
end

-- The site's fields written, and the host (its robots wait over) placed:
-- a site of one authority from what this script holds, else every authority
-- read again.
local function settle(w)
  hset_fields(sk, w)
  if g[S.hosts] == '1' then
    place_host(p, host, ready_at(hs[1], 0, as_written(g, w)))
  else
    refresh_site(p, host)
  end
end

local version = num(hs[2], 0)
if outcome == 'ok' then
  version = version + 1
  redis.call('HSET', hk, H.robots_state, 'k', H.robots_refresh, now + a.ttl_ms,
             H.robots_tries, 0, H.robots_wait, 0, H.robots_concurrency, a.concurrency,
             H.robots_delay, a.delay_ms, H.robots_floor, a.floor_ms, H.robots_fetched, now,
             H.robots_version, version)
  local w = {[S.robots_job] = 0}
  pace_site(w, site_of(host))
  -- The first page waits its gap after this fetch, at the claim (t) and at
  -- the start gate (s) alike.
  local first = now + a.first_gap_ms
  w[S.next_claim] = math.max(num(g[S.next_claim], 0), first)
  w[S.next_start] = math.max(num(g[S.next_start], 0), first)
  redis.call('HSET', p .. ':r', host, blob)
  hincr(KEYS[1], N.robots_fetched, 1)
  settle(w)
  return {'rules', 0, version}
end

local attempts = num(hs[3], 0) + 1
local base, cap = a.retry_base_ms, a.retry_cap_ms
local backoff = math.min(math.max(base * 2 ^ (attempts - 1), num(a.wait_ms, 0)), cap)
local good = num(hs[4], -1)
hincr(KEYS[1], N.robots_failed, 1)
if good >= 0 and now - good <= a.stale_max_ms then
  redis.call('HSET', hk, H.robots_tries, attempts, H.robots_state, 'k',
             H.robots_refresh, now + backoff, H.robots_wait, 0, H.robots_retry, backoff)
  settle({[S.robots_job] = 0})
  return {'stale', attempts, version}
end
redis.call('HSET', hk, H.robots_tries, attempts, H.robots_state, 'u',
           H.robots_wait, now + backoff, H.robots_retry, backoff)
-- (the host waits out rw: read again)
hset_fields(sk, {[S.robots_job] = 0})
refresh_site(p, host)
local max_attempts = a.max_attempts
if max_attempts > 0 and attempts >= max_attempts then
  return {'park', attempts, version}
end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return {'unreachable', attempts, version}
