-- Part of claim.lua (included where it says so): step 3's helpers, how a
-- claim paces what it takes (jitter, the site's and domain's turns, a
-- site's reservation) and leases a host's next URLs (lease_head). It reads
-- the locals claim.lua set above its include line.

-- 3. Claim: the helpers, the domains to wake, then one URL at a time.
local out = {}
local got, leased = 0, 0
-- The leases taken (score, member pairs), written to PP:leased in one ZADD
-- at the claim's end (nothing in between reads them).
local lease_members = {}
local jit_n = 0  -- claims so far, spreading the jitter of one call

-- A jittered gap around delay_ms, never below floor.
local function jittered(delay_ms, floor)
  local r = (rnd + jit_n * 0.6180339887) % 1
  jit_n = jit_n + 1
  return math.max(floor, math.floor(delay_ms * (1 - jitter + 2 * jitter * r)))
end

-- A domain's concurrency and delay in force (an operator's override, else
-- the settings) and whether it is paused.
-- (st: the fields as read, including rh, the site of its last lease, re,
-- when that site's reservation ends, and m: another site of the domain
-- claimed since, so one URL per claim.)
local function domain_limits(dom)
  local st = redis.call('HMGET', p .. ':d:' .. dom, D.next_claim, D.ctl_concurrency, D.ctl_delay,
                        D.ctl_paused, D.next_start, D.last_site, D.turns, D.reserved_until)
  return math.max(num(st[1], 0), num(st[5], 0)), tonumber(st[2] or dconc),
         delay_in_force(ddelay, st[3]), st[4] ~= false, st
end

-- The least gap between two starts on a gate whose delay is delay_ms: the
-- delay less its jitter, plus the window in which a claimed URL starts
-- (0: nothing to space).
local function start_gap(delay)
  local least = math.floor(delay * (1 - jitter))
  return least > 0 and start_window + least or 0
end

-- The start turn a claimed URL (off ms after now) takes on a gate (the
-- site's or the domain's hash): its worker starts it within start_window ms
-- of its offset, so no other start comes before the delay less its jitter
-- after that. A robots Crawl-delay (floor) counts from the end of the answer
-- instead (it allows one request at a time, and release.lua moves s on from
-- the end), so it needs no window. Returns the gate's next start (0: nothing
-- to space).
local function start_turn(floor, delay, off)
  local s = math.max(floor, start_gap(delay))
  return s > 0 and now + off + s or 0
end

-- The fields of a host's site record (PP:g:NAME) and of the host record
-- (PP:h:HOST) that a claim reads, each read once per host taken.
-- (READY_SITE and na among them: the step places the host in the ready set
-- without reading them again, refresh_site_known.)
local SITE = {S.address, S.address_until, S.domain, S.delay, S.floor, S.breaker, S.ctl_delay,
              S.in_flight, S.concurrency, S.ctl_concurrency, S.adaptive, S.first_answer, S.latency,
              S.next_claim, S.held, S.robots_job, S.ctl_paused, S.dns_job, S.next_start,
              S.hosts, S.alone, S.budget_job, S.pages, S.bytes, S.first_claim,
              S.budget_pages, S.budget_bytes, S.budget_ms}
local HOST = {H.robots_state, H.robots_refresh, H.woken, H.robots_version, H.queued, H.robots_wait}

-- Budgets (common.lua budget_left): the crawl's, from its settings, for
-- each site and for each registered domain. A domain's spend is read once a
-- claim, and counted on as it leases.
local budget = limits.budget or {}
local site_budget = {num(budget.host_pages, 0), num(budget.host_bytes, 0), num(budget.host_ms, 0)}
local dom_budget = {num(budget.domain_pages, 0), num(budget.domain_bytes, 0),
                    num(budget.domain_ms, 0)}
local dom_budgets = dom_budget[1] > 0 or dom_budget[2] > 0 or dom_budget[3] > 0
-- Inlinks raise queued URLs (admit.lua, PP:qm:HOST): a claimed one is forgotten there.
local inlinks_on = limits.inlinks == true
local dom_spend = {}
local function domain_spend(dom)
  local st = dom_spend[dom]
  if not st then
    st = record(p .. ':d:' .. dom, {D.pages, D.bytes, D.first_claim})
    dom_spend[dom] = st
  end
  return st
end

-- What a site (its record g as read) may still spend, and its domain while
-- a domain budget is on: the spent budget's name, its limit and whose it is
-- ("site" or "domain"), or nil; then how many more URLs it may be handed.
local function budget_room(g)
  local why, limit, left = budget_left(g, num(g[S.budget_pages], site_budget[1]),
                                       num(g[S.budget_bytes], site_budget[2]),
                                       num(g[S.budget_ms], site_budget[3]), now)
  if why or not dom_budgets or not g[S.domain] then return why, limit, 'site', left end
  local dwhy, dlimit, dleft = budget_left(domain_spend(g[S.domain]), dom_budget[1], dom_budget[2],
                                          dom_budget[3], now)
  return dwhy, dlimit, 'domain', math.min(left, dleft)
end

-- A site whose budget is spent: its worker ends its queue as dead letters
-- and refuses its new links (drop_host.lua, marked "q"); meanwhile (bj) the
-- site is out of the ready set, and back when that time runs out, for the
-- next claim to hand the job out again, if its worker vanished.
local BUDGET_JOB_MS = 10000
local function budget_job(host, sk, why, limit, whose)
  redis.call('HSET', sk, S.budget_job, now + BUDGET_JOB_MS)
  refresh_site(p, host)
  out[#out + 1] = host
  out[#out + 1] = 'B'
  out[#out + 1] = whose .. ' ' .. why .. ' ' .. limit
  out[#out + 1] = ''
end

-- The domain of a host just taken from the ready set (woken: it holds a
-- place at its server's address), the domain's delay
-- and how many more leases the host may take (1 once the domain's sites
-- take turns), or false if its domain is busy: then the host waits for the
-- domain (dw) instead. nil: no domain gate. Fourth: the domain's room when
-- its sites take turns (a domain reservation may use it), else nil.
-- A domain is a reservation's only while one site of it claims: its turns
-- then follow that site's. The first claim of another site waits until the
-- reservation under way ends, and from then on the domain's sites take
-- turns, one URL per claim.
local function domain_turn(host, dom, woken)
  if not dom then return nil end
  local t, conc, delay, paused, st = domain_limits(dom)
  if conc == 0 and delay == 0 and not paused then return nil end
  if st[6] and st[6] ~= site_of(host) then
    t = math.max(t, num(st[8], 0))
    if not st[7] then
      redis.call('HSET', p .. ':d:' .. dom, D.turns, 1)
      st[7] = '1'
    end
  end
  local in_flight = conc > 0 and domain_in_flight(p, dom, now) or 0
  local full = paused or (conc > 0 and in_flight >= conc)
  if not full and now >= t then
    local room = conc > 0 and conc - in_flight or math.huge
    return dom, delay, st[7] and 1 or room, st[7] and room
  end
  -- Paced: look again at its turn. Full: the end of a lease wakes it, and so
  -- does this (a no-op while it stays full), in case the scope is off then.
  -- A host woken for a place at its server's address (woken) goes first at
  -- the domain's next turn: until it starts, that place is held for nothing,
  -- and every name behind it at the address waits.
  queue_for_domain(p, host, dom, woken and 0 or redis.call('ZSCORE', ready, host), t)
  return false
end

-- A domain's waiting hosts are looked at when its next turn comes: a wake
-- set sooner (step 4's fallback, an earlier turn of this claim) would only
-- find it busy, so the wake moves to that turn, later (and the timers are
-- stored again after the claims: mt only ever comes sooner otherwise).
local moved_wakes = false
local function move_wake(dom, at)
  if dom_batch and dom_batch.dom == dom then
    dom_batch.wake = at
    return
  end
  if not dw_filled[dom] and redis.call('EXISTS', p .. ':dw:' .. dom) == 0 then return end
  redis.call('ZADD', p .. ':dwake', at, dom)
  dwake_at[dom] = at
  moved_wakes = true
end

-- Leases of the domain (di: expiry, member pairs; a member is a
-- fingerprint, or "R" .. host for a robots job) by host's site, the one
-- with turns off ms from now and the reservation over at until; the
-- domain's next claim is a jittered domain delay after off, and a URL's
-- start turn (start) moves its next start too, to that next claim at the
-- soonest: nobody else starts a URL of the domain before it, so the URL
-- that carries the turn may start up to the least gap before it on its
-- worker's word (lease_head). Returns that turn (0: none) and the domain's
-- next turn (its next claim or start, the later).
local function domain_took(dom, di, delay, start, off, until_ms, host)
  local batch = dom_batch and dom_batch.dom == dom and dom_batch
  if batch then
    for _, v in ipairs(di) do batch.di[#batch.di + 1] = v end
  else
    redis.call('ZADD', p .. ':di:' .. dom, unpack(di))
  end
  local t = now + off + jittered(delay, 0)
  local turn = start and start_turn(0, delay, off) or 0
  if turn > 0 then turn = math.max(turn, t) end
  local fields = {[D.next_claim] = t, [D.next_start] = turn > 0 and turn or nil,
                  [D.last_site] = site_of(host), [D.reserved_until] = until_ms + start_gap(delay)}
  if batch then
    for name, value in pairs(fields) do batch.fields[name] = value end
  else
    hset_fields(p .. ':d:' .. dom, fields)
  end
  move_wake(dom, math.max(t, turn))
  return turn, math.max(t, turn)
end

-- Does this host need its robots.txt fetched before any page? (unknown,
-- expired, unreachable past its retry time, or a fetch whose worker vanished)
local function robots_due(h)
  if robots_ms == 0 then return false end
  return h[H.robots_state] ~= 'k' or now >= num(h[H.robots_refresh], 0)
end

-- The offsets (ms from now) of the URLs one claim of a host reserves: the
-- first now, the others spaced as successive claims would space them (the
-- site's jittered delay, never below its floor, the domain's, and the least
-- gap between starts), as many as the site's and the domain's room (droom)
-- allow, its queue holds, fit in reserve_ms and the claim may still take.
-- A site that takes one request at a time (a Crawl-delay, adaptive pacing,
-- a concurrency of 1) is paced from the end of each answer, which no claim
-- can know: its next URLs get the offset -1, "after the one before ended",
-- and the worker starts each the site's delay after the start of the one
-- before and its floor (or adaptive delay) after its end; as many as about
-- reserve_ms of its answers and delays hold (lt: its answers' mean time),
-- SERIAL_MAX at most. g and h: the site's and host's records as read for
-- this step.
local SERIAL_MAX = 16
local function reservation(g, h, delay, floor, dom, ddelay, droom)
  local offs = {0}
  if reserve_ms <= 0 or g[S.breaker] == 'o' or g[S.breaker] == 'h' then return offs end
  local conc = site_concurrency(g)
  if conc == 1 then
    if num(g[S.in_flight], 0) > 0 then return offs end
    local cycle = num(g[S.latency], 0) + math.max(delay, floor, num(g[S.adaptive], 0))
    local k = math.min(num(h[H.queued], 0), extras + 1, SERIAL_MAX, droom or math.huge,
                       cycle > 0 and math.floor(reserve_ms / cycle) + 1 or SERIAL_MAX)
    for j = 2, k do offs[j] = -1 end
    extras = extras - math.max(k - 1, 0)
    return offs
  end
  local k = math.min(conc - num(g[S.in_flight], 0), droom or math.huge, num(h[H.queued], 0))
  local least = math.max(start_gap(delay), dom and start_gap(ddelay) or 0)
  local off = 0
  while #offs < k do
    local step = math.max(jittered(delay, floor), dom and jittered(ddelay, 0) or 0, least)
    if off + step > reserve_ms then break end
    if step > 0 then
      if extras <= 0 then break end
      extras = extras - 1
    elseif got + #offs >= want then
      break
    end
    off = off + step
    offs[#offs + 1] = off
  end
  return offs
end

-- The URLs popped from a host's queue (entry, score pairs; h: the host's
-- record as read), leased at their offsets: forgotten by the inlinks
-- (PP:qm:HOST), each a member of PP:leased holding its details
-- (lease_fields, written at the claim's end). Returns the leases as the
-- domain counts them in flight (expiry, fingerprint pairs).
local function take_popped(host, h, popped, offs)
  local k = #popped / 2
  if inlinks_on then
    if num(h[H.queued], 0) <= k then
      redis.call('DEL', p .. ':qm:' .. host)
    else
      local fps = {}
      for j = 1, k do fps[j] = string.sub(popped[2 * j - 1], 1, 16) end
      redis.call('HDEL', p .. ':qm:' .. host, unpack(fps))
    end
  end
  local leases = {}
  for j = 1, k do
    local entry, score = popped[2 * j - 1], popped[2 * j]
    local expiry = now + math.max(offs[j], 0) + lease_ms
    leases[2 * j - 1], leases[2 * j] = expiry, string.sub(entry, 1, 16)
    lease_members[#lease_members + 1] = expiry
    lease_members[#lease_members + 1] = host .. '\n' .. score .. '\n' .. worker .. '\n' .. entry
  end
  return leases
end

-- Lease the head of the host's queue (a reservation: its next URLs, or the
-- offsets forced) and move the site's next-allowed time on past the last by
-- its delay (with jitter, never below its floor fl: a robots Crawl-delay). g
-- and h: the site's and host's records as read for this step; turns: its
-- domain's sites take turns, so the host waits for the domain's next turn
-- (refresh_site_known). Returns how many start now, and the domain's next
-- turn (nil: no domain gate, or nothing leased).
local function lease_head(host, hk, sk, g, h, dom, ddelay, droom, forced, turns)
  local delay, floor = delay_in_force(g[S.delay], g[S.ctl_delay]), num(g[S.floor], 0)
  local offs = forced or reservation(g, h, delay, floor, dom, ddelay, droom)
  local _, _, _, room = budget_room(g)
  for j = #offs, math.max(room, 1) + 1, -1 do offs[j] = nil end  -- (callers check room > 0)
  local popped = redis.call('ZPOPMIN', p .. ':q:' .. host, #offs)
  if #popped == 0 then
    redis.call('HSET', hk, H.queued, 0)  -- repair: a host without a queue is not ready
    ready_moved[host] = false
    redis.call('ZREM', ready, host)
    return 0
  end
  if h[H.woken] then redis.call('HDEL', hk, H.woken) end  -- its place at the address is taken now
  local k = #popped / 2
  local leases = take_popped(host, h, popped, offs)
  -- the URL that carries the turns: the last one spaced by offsets, or the
  -- first of a serial reservation (the others are paced by its worker); the
  -- domain is held for the whole reservation
  local serial = offs[k] < 0
  local carrier, last = serial and 1 or k, serial and reserve_ms or offs[k]
  -- The site's next claim; its next start is no sooner (a paced site's
  -- carrier may then start up to the least gap before it, see latest below).
  local next_claim = now + offs[carrier] + jittered(delay, floor)
  local turn = start_turn(floor, delay, offs[carrier])
  if turn > 0 and floor == 0 then turn = math.max(turn, next_claim) end
  local w = {[S.in_flight] = num(g[S.in_flight], 0) + k, [S.next_claim] = next_claim,
             [S.next_start] = turn > 0 and turn or nil, [S.pages] = num(g[S.pages], 0) + k,
             [S.first_claim] = g[S.first_claim] or now}
  if dom_budgets and g[S.domain] then
    local spend = domain_spend(g[S.domain])
    spend[D.pages] = hincr(p .. ':d:' .. g[S.domain], D.pages, k)
    if not spend[D.first_claim] then
      spend[D.first_claim] = now
      redis.call('HSETNX', p .. ':d:' .. g[S.domain], D.first_claim, now)
    end
  end
  if g[S.breaker] == 'o' or g[S.breaker] == 'h' then
    -- Breaker cool-down over: this URL is the one probe (half-open); the
    -- site is held until its release says how it went (or the lease ends).
    w[S.breaker], w[S.held] = 'h', now + lease_ms
  end
  hset_fields(sk, w)
  redis.call('HSET', hk, H.queued, num(h[H.queued], 0) - k)
  local dturn, domain_at = 0, nil
  if dom then
    dturn, domain_at = domain_took(dom, leases, ddelay, true, offs[carrier], now + last, host)
  end
  refresh_site_known(p, host, as_written(g, w), num(h[H.queued], 0) - k, h[H.robots_wait],
                     domain_at, turns and dom or nil)
  -- The latest a URL may start without asking start.lua: the least gap
  -- before the next one's offset for all but the last (0: a serial
  -- reservation's, paced by its worker); for the last (or only) one, the
  -- least gap before the site's and the domain's next start (nobody else
  -- starts there sooner), and never before the window has passed.
  local site_least = math.floor(delay * (1 - jitter))
  local dom_least = dom and math.floor(ddelay * (1 - jitter)) or 0
  local least = math.max(site_least, floor, dom_least)
  local starts = 0
  for j = 1, k do
    local latest = offs[j] + start_window
    if serial then
      latest = j == 1 and start_window or 0
    elseif j < k then
      latest = offs[j + 1] - least
    elseif turn > 0 and floor == 0 then
      local by = turn - now - site_least
      if dturn > 0 then by = math.min(by, dturn - now - dom_least) end
      latest = math.max(latest, by)
    end
    out[#out + 1] = host
    out[#out + 1] = popped[2 * j - 1]
    out[#out + 1] = h[H.robots_version] or '0'
    -- (only the last carries the turns: see the header)
    out[#out + 1] = (j == carrier and (turn .. ' ' .. dturn) or '0 0') .. ' ' .. offs[j]
      .. ' ' .. latest .. ' ' .. delay .. ' ' .. floor .. ' ' .. popped[2 * j]
    if offs[j] == 0 then starts = starts + 1 end
  end
  leased = leased + k
  return starts, domain_at
end
