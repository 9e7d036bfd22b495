-- Release leases of one partition: each exactly once, whatever happened.
--
-- A lease that is no longer held (it expired and went back to its queue, or
-- was released already) is left alone and counted as stale, so a late or
-- repeated release can never double-count or resurrect a URL.
--
-- A release also tells the site's health (every scheme and port of the
-- host's name: site_key in common.lua): a hold (ms) pushes back
-- the site's next-allowed time for every worker (429 / 503: the server asked
-- us to back off), and a failure or success drives the host's circuit
-- breaker (fields cf consecutive failures, bs "o" open / "h" half-open,
-- bo openings): past the threshold of consecutive failures the breaker
-- opens and holds the host for base * 2^(openings - 1) ms (capped); then
-- claim.lua hands out one probe (half-open); its success closes the breaker,
-- its failure opens it again, longer; after max openings the host is to be
-- parked (the caller moves its queued URLs to dead letters).
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] worker id (only its own leases are released)
-- ARGV[3]  the crawl's limits, a JSON object by name (scriptargs.release_limits):
--          breaker_threshold, breaker_base_ms (the cool-down's base),
--          breaker_cap_ms, breaker_max_openings (0: never park);
--          adaptive_factor (0: off), adaptive_max_ms; jitter (0..1);
--          domain_concurrency, domain_delay_ms (the settings: common.lua
--          alone_in_domain); domain_budget (true while a domain budget is
--          on: the domain record counts its sites' bytes and URLs given
--          back, common.lua budget_left)
-- then 3 values per lease: its member of PP:leased ("HOST\nSCORE\nWORKER\n"
-- then its entry, which starts with its 16-byte fingerprint: what the
-- claim wrote; its score is the check that this worker holds it still); its
-- new entry ("" to keep it); and a JSON object (scriptargs.release_item):
-- op, arg, hold_ms, health ("fail", "ok" or "" for neither), fetch_ms (how
-- long the answer took, 0: no answer), revisit_ms (0: none), bytes (what
-- its answers brought: the site's budget, common.lua budget_left), unsent
-- (true: refused before its download, it cost its site nothing)
--   op "done":   the URL was fetched; with a revisit, it is due again that
--                many ms from now (PP:v:HOST, PP:vdue: claim.lua queues it then)
--   op "refused": not fetched, for good (arg, the reason: "robots", a learned
--                rule's); counted by reason (N.refused_by), never as done
--   op "return": back to the head of its host's queue (graceful stop)
--   op "retry":  delayed by arg ms, with entry as its new record (if not "")
--   op "dead":   dead letter; arg is the JSON reason
--   op "ipwait": back to its queue, its host parked for its server address
--                (common.lua park_for_ip); arg is "ADDR\nwake ms\nknown ms"
-- Returns {released, stale, the soonest time it made anything due (ms, -1:
-- none; common.lua note_due), then per breaker transition: event, host, ms}
-- with event "open" (ms: cool-down), "close" or "park".
local p, worker = ARGV[1], ARGV[2]
local limits = cjson.decode(ARGV[3])
local threshold, base = num(limits.breaker_threshold, 0), num(limits.breaker_base_ms, 0)
local cap, max_openings = num(limits.breaker_cap_ms, 0), num(limits.breaker_max_openings, 0)
local factor, adapt_cap = num(limits.adaptive_factor, 0), num(limits.adaptive_max_ms, 0)
local jitter = num(limits.jitter, 0)
local dconc, ddelay = num(limits.domain_concurrency, 0), num(limits.domain_delay_ms, 0)
local dom_budgets = limits.domain_budget == true
local FIRST, EACH = 4, 3  -- where the leases start in ARGV, and values per lease
local now = now_ms()
local released, stale = 0, 0
local counts = {[N.done] = 0, [N.queued] = 0, [N.delayed] = 0, [N.dead] = 0,
                [N.robots_denied] = 0, [N.breaker_open] = 0, [N.breaker_parked] = 0,
                [N.revisit] = 0, [N.hosts_fetched] = 0}
local transitions = {}

local function breaker_failure(sk, host)
  local cf = hincr(sk, S.failures, 1)
  local bs = redis.call('HGET', sk, S.breaker)
  if bs == 'o' or bs == 'x' or (bs ~= 'h' and cf < threshold) then return end
  local bo = hincr(sk, S.openings, 1)
  if max_openings > 0 and bo > max_openings then
    redis.call('HSET', sk, S.breaker, 'x', S.held, 0)  -- parked: no probe hold left behind
    if bs == 'h' then counts[N.breaker_open] = counts[N.breaker_open] - 1 end
    counts[N.breaker_parked] = counts[N.breaker_parked] + 1
    transitions[#transitions + 1] = {'park', host, 0}
    return
  end
  local cool = math.min(base * 2 ^ (bo - 1), cap)
  redis.call('HSET', sk, S.breaker, 'o', S.cooldown, cool)
  if bs == 'h' then
    redis.call('HSET', sk, S.held, now + cool)  -- replaces the probe's hold
  else
    hold_host(sk, now + cool)  -- no claim (w) and no start (bk) until then
  end
  if bs ~= 'h' then counts[N.breaker_open] = counts[N.breaker_open] + 1 end
  transitions[#transitions + 1] = {'open', host, cool}
end

-- A host with a robots.txt Crawl-delay (floor fl) takes one request at a time,
-- and its next request may start no sooner than fl after this one *ended*
-- (claims: t; starts: s). Spacing the starts alone is not enough: a worker
-- whose reactor stalls between the start gate and the socket sends late, and
-- the next request, started on time by another worker, follows it too close.
-- (g: the site's fields as read for this release; w: the fields to write.)
local function not_before(g, w, at)
  if at > num(w[S.next_claim] or g[S.next_claim], 0) then w[S.next_claim] = at end
  if at > num(w[S.next_start] or g[S.next_start], 0) then w[S.next_start] = at end
end

local function crawl_delay_from_end(g, w)
  local fl = num(g[S.floor], 0)
  if fl > 0 then not_before(g, w, now + fl) end
end

-- The site's next claim and start come no sooner than its delay (less its
-- jitter) after this request started, fetch_ms before its answer came at
-- the latest: a reservation (claim.lua) started several of its URLs since
-- its claim moved them on.
local function delay_from_start(g, w, fetch_ms)
  local least = math.floor(delay_in_force(g[S.delay], g[S.ctl_delay]) * (1 - jitter))
  if fetch_ms > 0 and least > 0 then not_before(g, w, now - fetch_ms + least) end
end

-- Adaptive pacing: the site's next request waits factor x this answer's
-- time after it ended (capped), at the claim (t) and at the start gate (s);
-- while that is longer than its delay (ad above dl) the site gets one request
-- at a time (common.lua), until a faster answer brings it back down. A robots
-- Crawl-delay, holds and the breaker are separate floors: adaptation only
-- ever adds to them. A site's first answer ends its one-at-a-time start
-- (fa, common.lua site_concurrency). The site's latency lt (a moving mean of
-- its answers' times) is kept either way: the crawl's ceiling is made of it
-- (crawler/frontier/capacity.py).
local function adapt(g, w, sk, fetch_ms)
  if fetch_ms <= 0 then return end
  if g[S.first_answer] then  -- its first answer: the site's concurrency is its own again
    redis.call('HDEL', sk, S.first_answer)
    g[S.first_answer] = nil
  end
  local lt = fetch_ms
  if g[S.latency] then
    lt = math.floor(0.7 * num(g[S.latency], fetch_ms) + 0.3 * fetch_ms)
  end
  w[S.latency] = lt
  if factor <= 0 then return end
  local ad = math.min(math.floor(factor * fetch_ms), adapt_cap)
  w[S.adaptive] = ad
  not_before(g, w, now + ad)
end

local function breaker_success(g, w, sk, host)
  -- An answer from the host proves its name resolves: a run of failed
  -- lookups (dns.lua) is over.
  if g[S.dns_failures] then
    redis.call('HDEL', sk, S.dns_failures, S.dns_until, S.dns_kind, S.dns_hold)
  end
  if g[S.breaker] == 'h' then
    redis.call('HDEL', sk, S.failures, S.breaker, S.openings, S.cooldown)
    w[S.held] = 0  -- the probe's hold
    counts[N.breaker_open] = counts[N.breaker_open] - 1
    transitions[#transitions + 1] = {'close', host, 0}
  elseif num(g[S.failures], 0) > 0 then
    w[S.failures] = 0
  end
  -- (as written: the next lease of the group reads this)
  g[S.dns_failures], g[S.breaker], g[S.failures] = nil, nil, nil
end

-- The fields of the site record a release reads, once per host in a row.
-- (READY_SITE and na among them: the group's end places the host in the
-- ready set without reading them again, refresh_site_known.)
local SITE = {S.in_flight, S.domain, S.next_claim, S.next_start, S.floor, S.latency, S.failures,
              S.breaker, S.dns_failures, S.delay, S.ctl_delay, S.concurrency, S.held, S.robots_job,
              S.ctl_concurrency, S.ctl_paused, S.adaptive, S.first_answer, S.dns_job, S.hosts,
              S.alone, S.budget_job, S.pages, S.bytes}

-- A done URL due again in revisit_ms: kept by its host until then. Its
-- score is in whole seconds, rounded up (a 32-bit integer in the listpack
-- until 2038, where ms take 64 bits: 4 bytes less for every URL kept);
-- PP:vdue stays in ms.
local function schedule_revisit(host, entry, revisit_ms)
  local due_s = math.ceil((now + revisit_ms) / 1000)
  local due = due_s * 1000
  redis.call('ZADD', p .. ':v:' .. host, due_s, entry)
  if string.find(entry, '"lm":', 17, true) then  -- (admit.lua bring_forward finds it)
    redis.call('HSET', p .. ':vm:' .. host, string.sub(entry, 1, 16), entry)
  end
  local cur = redis.call('ZSCORE', p .. ':vdue', host)
  if not cur or due < num(cur, 0) then
    redis.call('ZADD', p .. ':vdue', due, host)
    timer_at(p, due, 'vdue')
  end
  counts[N.revisit] = counts[N.revisit] + 1
end

-- Commands with many members, in chunks (Lua's unpack has a limit).
local function each_chunk(cmd, key, members)
  for j = 1, #members, 500 do
    redis.call(cmd, key, unpack(members, j, math.min(j + 499, #members)))
  end
end

-- The leases of one host in a row (the caller sorts them by host) share
-- one read and one write of its site, one look at its domain and one
-- refresh of the ready set: a reservation's URLs are released together.
-- {host, hk, sk, g (the site as read), writes (to write), ended (domain members)}
local group = nil
-- Per domain: its record's t, s, m as read (a release writes none of them),
-- and its leases that ended here (removed from PP:di:DOMAIN at the end, in
-- one go: a domain's reservation is released together).
local domains, domain_ended, domain_order = {}, {}, {}

local function close_group()
  if not group then return end
  hset_fields(group.sk, group.writes)
  if dom_budgets and group.g[S.domain] and (group.bytes > 0 or group.unspent > 0) then
    local dk = p .. ':d:' .. group.g[S.domain]
    if group.bytes > 0 then hincr(dk, D.bytes, group.bytes) end
    if group.unspent > 0 then hincr(dk, D.pages, -group.unspent) end
  end
  local domain_at, turns_dom
  if group.g[S.domain] and not alone_in_domain(group.g, dconc, ddelay) and #group.ended > 0 then
    local dom = group.g[S.domain]
    local ended = domain_ended[dom]
    if not ended then
      ended = {}
      domain_ended[dom] = ended
      domain_order[#domain_order + 1] = dom
    end
    for _, fp in ipairs(group.ended) do ended[#ended + 1] = fp end
    local st = domains[dom]
    if not st then
      st = redis.call('HMGET', p .. ':d:' .. dom, D.next_claim, D.next_start, D.turns)
      domains[dom] = st
    end
    domain_at = math.max(now, num(st[1], 0), num(st[2], 0))
    wake_domain(p, dom, domain_at)
    turns_dom = st[3] and dom
  end
  if group.reread then
    refresh_site(p, group.host)
  else
    refresh_site_known(p, group.host, as_written(group.g, group.writes), nil, nil, domain_at,
                       turns_dom)
  end
  group = nil
end

local function group_of(host)
  if group and group.host == host then return group end
  close_group()
  local sk = site_key(p, host)
  group = {host = host, hk = p .. ':h:' .. host, sk = sk, g = record(sk, SITE), writes = {},
           ended = {}, bytes = 0, unspent = 0}
  return group
end

-- Which of the leases named are still this worker's: one ZMSCORE for the
-- call, one ZREM at its end (a lease named twice counts once).
local mine = {}
for i = FIRST, #ARGV, EACH do
  local _, _, holder = lease_fields(ARGV[i])
  if holder == worker then mine[#mine + 1] = ARGV[i] end
end
local held, gone = {}, {}
for j = 1, #mine, 500 do
  local scores = redis.call('ZMSCORE', p .. ':leased', unpack(mine, j, math.min(j + 499, #mine)))
  for k = 1, #scores do
    if scores[k] then held[mine[j + k - 1]] = true end
  end
end

for i = FIRST, #ARGV, EACH do
  local member, new_entry = ARGV[i], ARGV[i + 1]
  local r = cjson.decode(ARGV[i + 2])
  local op, arg, health = r.op, r.arg or '', r.health or ''
  local hold_ms, fetch_ms = num(r.hold_ms, 0), num(r.fetch_ms, 0)
  local revisit_ms, bytes = num(r.revisit_ms, 0), num(r.bytes, 0)
  local host, score, holder, entry, fp = lease_fields(member)
  -- (the member names its worker: it is there only while this worker holds it)
  if holder == worker and held[member] then
    held[member] = nil
    gone[#gone + 1] = member
    if new_entry ~= '' then entry = new_entry end
    local gr = group_of(host)
    local hk, sk, g, w = gr.hk, gr.sk, gr.g, gr.writes
    w[S.in_flight] = num(w[S.in_flight] or g[S.in_flight], 1) - 1
    gr.ended[#gr.ended + 1] = fp
    if bytes > 0 then
      w[S.bytes] = num(w[S.bytes] or g[S.bytes], 0) + bytes
      gr.bytes = gr.bytes + bytes
    end
    if op == 'return' or op == 'ipwait' or r.unsent == true then
      -- never started, or refused before its download (robots.txt, a learned
      -- rule, the guard): it cost its server nothing, nor its budget
      w[S.pages] = math.max(num(w[S.pages] or g[S.pages], 1) - 1, 0)
      gr.unspent = gr.unspent + 1
    end
    if op == 'done' then
      counts[N.done] = counts[N.done] + 1
      -- (the host's first page makes it one of the hosts fetched from)
      if hincr(hk, H.pages_fetched, 1) == 1 then
        counts[N.hosts_fetched] = counts[N.hosts_fetched] + 1
      end
      if revisit_ms > 0 then schedule_revisit(host, entry, revisit_ms) end
    elseif op == 'refused' then
      local name = N.refused_by .. arg
      counts[name] = (counts[name] or 0) + 1
      if arg == 'robots' then counts[N.robots_denied] = counts[N.robots_denied] + 1 end
    elseif op == 'return' or op == 'ipwait' then
      redis.call('ZADD', p .. ':q:' .. host, score, entry)
      hincr(hk, H.queued, 1)
      counts[N.queued] = counts[N.queued] + 1
    elseif op == 'retry' then
      redis.call('ZADD', p .. ':delayed', now + tonumber(arg), fp)
      timer_at(p, now + tonumber(arg), 'delayed')
      redis.call('HSET', p .. ':dd', fp, host .. '\n' .. score .. '\n' .. entry)
      counts[N.delayed] = counts[N.delayed] + 1
    else
      dead_letter(KEYS[1], p, fp, host, arg, entry)
      counts[N.dead] = counts[N.dead] + 1
    end
    if hold_ms > 0 then
      hold_host(sk, now + hold_ms)
      w[S.concurrency] = 1  -- the server asked us to slow down: one at a time
      gr.reread = true  -- (hold_host wrote the site itself)
    end
    if op ~= 'return' and op ~= 'ipwait' then
      crawl_delay_from_end(g, w)
      delay_from_start(g, w, fetch_ms)
      adapt(g, w, sk, fetch_ms)
    end
    if health == 'ok' then breaker_success(g, w, sk, host) end
    if health == 'fail' or op == 'ipwait' then
      -- (the breaker and the address write the site themselves: the group
      -- ends here, and the next lease of the host reads it afresh)
      local ended = group
      close_group()
      if health == 'fail' then breaker_failure(sk, host) end
      if op == 'ipwait' then
        local addr, wake_ms, known_ms = split_fields(arg, 3)
        redis.call('HSET', sk, S.address, addr, S.address_until, now + tonumber(known_ms))
        if redis.call('HGET', p .. ':h:' .. host, H.woken) then
          refresh_site(p, host)  -- woken before this park came (ipwake.lua): it goes
        else
          park_for_ip(p, host, addr, now + tonumber(wake_ms))
        end
      elseif ended then
        refresh_site(p, host)
      end
    end
    released = released + 1
  else
    stale = stale + 1
  end
end
close_group()
each_chunk('ZREM', p .. ':leased', gone)
for _, dom in ipairs(domain_order) do each_chunk('ZREM', p .. ':di:' .. dom, domain_ended[dom]) end

if released > 0 then hincr(KEYS[1], N.leased, -released) end
for name, n in pairs(counts) do
  if n ~= 0 then hincr(KEYS[1], name, n) end
end
if stale > 0 then hincr(KEYS[1], N.stale, stale) end
local out = {released, stale, due_reply(now)}
for _, t in ipairs(transitions) do
  out[#out + 1] = t[1]
  out[#out + 1] = t[2]
  out[#out + 1] = t[3]
end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return out
