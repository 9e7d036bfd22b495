"""Settings for a broad crawl: many hosts, each visited slowly.

Scrapy's defaults suit one site crawled quickly. A broad crawl is the
opposite: thousands of hosts at once, each one treated gently, run for days
by an operator who reads logs, not tracebacks. Every value below says why it
differs from Scrapy's default. Override any of them with ``-s NAME=VALUE`` or
in ``custom_settings``.
"""

from crawler import __version__

# The project's name, and where Scrapy finds its spiders.
BOT_NAME = "broadcrawl"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
# Our own commands: `scrapy frontier status|dead|requeue|drop-host`.
COMMANDS_MODULE = "crawler.commands"

# --- Identity ---------------------------------------------------------------
# One product token names the crawler everywhere: robots.txt groups are matched
# against it (RFC 9309 section 2.2.1: letters, "_" and "-" only) and it leads
# the User-Agent, so a site owner who sees the User-Agent in a log knows which
# robots.txt group applies. Operators: put YOUR contact URL or e-mail address
# in USER_AGENT before crawling the real web.
ROBOTSTXT_USER_AGENT = "BroadCrawl"
USER_AGENT = f"{ROBOTSTXT_USER_AGENT}/{__version__} (+https://example.invalid/crawler-contact)"

# --- Concurrency and politeness --------------------------------------------
# Many hosts in parallel, few requests to any one of them: 64 in flight in all,
# at most 4 per host, with a randomised delay between requests to one host
# (0.5-1.5 x DOWNLOAD_DELAY, so requests don't arrive in lock-step). A robots
# Crawl-delay or Request-rate slows a host down further (see Robots).
CONCURRENT_REQUESTS = 64
CONCURRENT_REQUESTS_PER_DOMAIN = 4
DOWNLOAD_DELAY = 1.0
DOWNLOAD_DELAY_JITTER = 0.5
# AutoThrottle reacts to latency per host, which the frontier's pacing does
# with the robots rules in view; leave it off so two controllers don't fight.
AUTOTHROTTLE_ENABLED = False
# What a callback yields (an item, a few dozen links) is handled by at most
# this many tasks at once. Scrapy starts all of them for every response
# however little it yielded (100 by default: a tenth of the crawl's CPU on
# small pages); the links are queued synchronously and the archive's
# pipeline applies its own backpressure, so a few are as fast.
CONCURRENT_ITEMS = 8

# --- Robots (RFC 9309; crawler/robots, README "Robots policy") --------------
# Obey robots.txt, with the crawler's policy instead of Scrapy's middleware
# (which fails open and caches per process): each host's robots.txt is fetched
# once per cache period by one worker for all, before any page request, and
# the decision is kept in the frontier.
ROBOTSTXT_OBEY = True
# Cache a robots.txt this long at most (RFC 9309 2.4: 24 hours), or as long
# as its Cache-Control max-age says when shorter, but not under the minimum.
ROBOTS_CACHE_SECONDS = 86400
ROBOTS_CACHE_MIN_SECONDS = 900
# The robots.txt fetch: its own timeout, and the bytes parsed (the rest of a
# bigger file is ignored, RFC 9309 2.5; a file is never rejected for size).
ROBOTS_TIMEOUT = 10.0
# Follow the sitemaps a seed host's robots.txt lists (the spider argument
# sitemaps=1/0 decides for one job).
ROBOTS_SITEMAPS = False
ROBOTS_MAX_BYTES = 512000
# Crawl-delay / Request-rate slow a host down (concurrency 1, at least that
# long between requests); above this many seconds the delay is clamped.
ROBOTS_MAX_CRAWL_DELAY = 60.0
# Unreachable (5xx, 429, timeout, network error): nothing of the host is
# fetched; robots.txt is tried again after 60 s, doubling up to 1 h (or after
# the Retry-After it came with, when longer). A last
# good copy keeps serving for up to 30 days meanwhile. With no good copy, after
# 8 failed tries (~3 h) the host's queued URLs become dead letters
# "robots-unreachable" (scrapy frontier requeue brings them back), so a finite
# crawl can end; 0 keeps them waiting for good.
ROBOTS_RETRY_BASE = 60.0
ROBOTS_RETRY_MAX = 3600.0
ROBOTS_UNREACHABLE_MAX_ATTEMPTS = 8
ROBOTS_STALE_MAX_DAYS = 30.0
# Parsed rules kept in each worker's memory (hosts).
ROBOTS_CACHE_SIZE = 10000

# --- Address guard (SSRF; crawler/addressguard.py, README "Address guard") --
# Never connect to loopback, private, link-local, shared (CGNAT), multicast,
# reserved or unspecified addresses, IPv4 or IPv6 (IPv4 inside IPv6 too): links
# on strangers' pages must not reach a cloud metadata service, our own Redis or
# an intranet. URLs are checked when they are queued and again before each
# download (literal addresses in any spelling, localhost, *.local,
# *.internal, names without a dot; redirects and proxied requests included);
# the resolver checks every DNS answer (impossible behind a proxy, which
# resolves names itself). Stats: guard/blocked/<reason>.
ADDRESS_GUARD_ENABLED = True
# Networks (CIDR or single addresses) allowed anyway, in URLs and as DNS
# answers, e.g. ["10.20.0.0/16"] to crawl an intranet.
ADDRESS_GUARD_ALLOW: list[str] = []
# Networks allowed only as the DNS answer for a name, never as a literal in a
# URL (the test harness resolves every name to 127.0.0.1).
ADDRESS_GUARD_ALLOW_RESOLVED: list[str] = []
# Trusted host names ("name" or "*.domain"): no name rule, no DNS check. List a
# proxy here if it is given by a name that resolves to a private address.
ADDRESS_GUARD_ALLOW_HOSTS: list[str] = []
# The crawl resolver (crawler/dns/, see DNS below) checks every DNS answer.
# With DNS_NAMESERVERS empty it asks the machine's resolver; name an
# IResolverSimple here to ask that instead (IPv4 only: the test harness's
# loopback-only resolver). "crawler.resolver.GuardedResolver" as
# TWISTED_DNS_RESOLVER is the older guard, around this resolver or Scrapy's.
ADDRESS_GUARD_RESOLVER = ""

# Scrapy's HTTP/1.1 handler without Twisted's hidden second attempt on a
# failed keep-alive connection: every attempt is the retry policy's.
DOWNLOAD_HANDLERS = {
    "http": "crawler.handlers.CountedHTTP11DownloadHandler",
    "https": "crawler.handlers.CountedHTTP11DownloadHandler",
}
# --- Retries, backoff and circuit breakers (crawler/middlewares/retry.py) ---
# Transient failures are retried up to RETRY_TIMES times, waiting in the
# frontier (no slot or memory held): Retry-After when the server sends one
# (capped at RETRY_AFTER_MAX seconds), else exponential backoff with full
# jitter, base x 2^attempt up to RETRY_BACKOFF_MAX. Then the URL is dead.
RETRY_TIMES = 3
RETRY_HTTP_CODES = [408, 429, 500, 502, 503, 504, 522, 524]
RETRY_BACKOFF_BASE = 2.0
RETRY_BACKOFF_MAX = 600.0
RETRY_AFTER_MAX = 3600.0
# These answers hold the whole host back (for every worker) as long as the
# URL's own wait, and leave it one request at a time: the server asked us to
# slow down.
BACKOFF_HTTP_CODES = [429, 503]
# Per-host circuit breaker: this many consecutive failures (network errors,
# timeouts, 5xx) open it; no request to the host for the cool-down (doubling
# from BREAKER_COOLDOWN up to BREAKER_COOLDOWN_MAX seconds), then one probe.
# After BREAKER_MAX_OPENINGS openings its queued URLs become dead letters
# "host-unreachable" (scrapy frontier requeue brings them back).
BREAKER_THRESHOLD = 5
BREAKER_COOLDOWN = 30.0
BREAKER_COOLDOWN_MAX = 3600.0
BREAKER_MAX_OPENINGS = 6

# --- The frontier -------------------------------------------------------------
# All crawl state (queues, dedup, leases, per-host politeness) lives in Redis,
# shared by every worker (crawler/frontier). With REDIS_URL unset, an embedded
# Redis keeps it in JOBDIR/frontier (or .scrapy/frontier/<spider> without a
# JOBDIR), so a stopped or killed crawl resumes on the next `scrapy crawl`.
# CONCURRENT_REQUESTS_PER_DOMAIN, DOWNLOAD_DELAY, DOWNLOAD_DELAY_JITTER and
# DOWNLOAD_SLOTS keep their meaning, but are enforced by the frontier across
# all workers.
#
# The sites of one registered domain (www.a.example, img.a.example, ten
# thousand wildcard subdomains) are one organisation's servers: beyond each
# host's own limits they share these, across all workers (0 turns a limit
# off). Twice a host's concurrency and at most four starts a second let a
# domain with a few subdomains crawl as fast as before, while a domain of a
# thousand subdomains is fetched like a few hosts, not like a thousand. The
# registered domain comes from the Public Suffix List snapshot tldextract
# ships (crawler/domains.py): alice.github.io and bob.github.io are two.
FRONTIER_DOMAIN_CONCURRENCY = 8
FRONTIER_DOMAIN_DELAY = 0.25
# Many names can point at one server (shared hosting, a CDN edge): beyond its
# sites' and domains' limits, every IP address the crawl connects to (the
# first of a name's answer, the one connected to first) has at most this many
# requests in flight across all workers and names, started this far apart.
# 16 in flight is what a few browsers open; an overloaded server answers
# slower and so gets fewer requests a second by itself, while a CDN edge
# shared by hundreds of seeds is not cut to a trickle, as a delay per address
# would (set one for fleets of small shared hosts). A request the address
# has no room for holds no download slot: its host is parked until a request
# on the address ends (crawler/frontier/ipgates.py). Requests sent through a
# proxy are not gated: the proxy connects. 0 turns a limit off.
FRONTIER_IP_CONCURRENCY = 16
FRONTIER_IP_DELAY = 0.0
# Adaptive pacing (Heritrix's delay factor): after each answer, a host's next
# request waits FACTOR x the time that answer took, at most MAX_DELAY seconds,
# and a host slowed down so gets one request at a time. DOWNLOAD_DELAY, a
# robots.txt Crawl-delay, Retry-After and the breaker stay floors it never
# undercuts. With 2, a server answering in 20 ms keeps DOWNLOAD_DELAY, one
# answering in 8 s is asked every 16 s: the crawler takes at most a third of a
# slow server's time. 0 turns it off.
FRONTIER_ADAPTIVE_FACTOR = 2.0
FRONTIER_ADAPTIVE_MAX_DELAY = 30.0
SCHEDULER = "crawler.scheduling.scheduler.FrontierScheduler"
# The shared frontier's Redis (scrapy-redis's name), e.g.
# "redis://127.0.0.1:6379/0"; None: the embedded one in JOBDIR (or a folder of
# its own). With a password, keep the URL off the command line (ps, scrapyd's
# job list, shell history): REDIS_URL_FILE names a file holding it (mode 600),
# e.g. "/etc/broadcrawl/redis-url", else the environment variable
# BROADCRAWL_REDIS_URL is used. REDIS_URL comes first.
REDIS_URL: str | None = None
REDIS_URL_FILE: str | None = None
# Over a network: rediss:// (TLS), with redis-py's ssl_* options in the URL's
# query (?ssl_ca_certs=ca.crt&ssl_certfile=w.crt&ssl_keyfile=w.key) or in
# REDIS_PARAMS (redis-py's keyword arguments; None: none), and a
# least-privilege ACL user: `scrapy acl worker` prints its rule
# (docs/operations.md, "A Redis on a network").
REDIS_PARAMS: dict[str, object] | None = None
# Keys of one crawl start with this (%(spider)s is the spider's name).
FRONTIER_NAMESPACE = "frontier:%(spider)s"
# Hosts are spread over this many partitions (hash-tagged for Redis Cluster).
# All workers of a frontier must use the same value.
FRONTIER_PARTITIONS = 16
# Each partition's seen set is split into this many Redis sets (the layout a
# crawl's first worker stores; later workers use the stored one).
FRONTIER_SEEN_BUCKETS = 4096
# The request meta keys a URL's record keeps across Redis; None: the crawler's
# own list (crawler.frontier.records.DEFAULT_META_KEYS: depth, referrer,
# retry and redirect state, scope hops, the seed mark).
FRONTIER_META_KEYS: list[str] | None = None
# A worker asks a partition for URLs only when the last claim there said
# something is due, after it changed something there, or when another
# worker's change made something due sooner (a message on the crawl's wake
# channel); every partition is asked again at least this often (seconds),
# behind the messages. 0: every partition at every claim.
FRONTIER_CLAIM_SWEEP = 30.0
# A claim reserves a site's next URLs, as many as its delay and concurrency
# allow in this many seconds of its schedule; the worker starts each on its
# turn, without asking Redis again. A worker that dies loses at most its
# reservations (back after FRONTIER_LEASE_SECONDS); an operator's change
# (scrapy frontier host) ends them within about a second. 0: one URL per
# host and claim.
FRONTIER_RESERVE_SECONDS = 3.0
# Each worker remembers this many of the URLs it offered lately (two
# generations of hashes, a few MB) and counts a link to one of them as a
# duplicate without asking Redis. 0: every link goes to Redis.
FRONTIER_RECENT_OFFERS = 65536
# Redis replicates asynchronously: a master that dies may lose the writes of
# its last moments. A worker keeps what it admitted in the last this many
# seconds and admits it again when Redis answers after failing (a failover),
# so no link is lost; survivors count as duplicates. 0: off.
FRONTIER_REPLAY_SECONDS = 10.0
# A claimed URL is leased for this long; the worker renews it while it works.
# After a crash the URL returns to its queue within this time.
FRONTIER_LEASE_SECONDS = 60
# REDIS_URL names one node of a Redis Cluster: every frontier script touches
# one partition, whose keys share a hash tag (one slot), so the frontier runs
# unchanged on a Cluster; the clients must be cluster clients.
REDIS_CLUSTER = False
# A crawl id (spider argument crawl_id, or this setting) gives the crawl a
# namespace of its own: FRONTIER_NAMESPACE + ":" + id. The same id again
# continues that crawl (its dedup, its queues); a new id is a fresh crawl, e.g.
# one per month for a recurring crawl. `scrapy frontier crawls` lists them,
# `scrapy frontier delete --crawl-id ID --yes` removes one.
FRONTIER_CRAWL_ID = ""
# Keep a worker alive this long with an empty frontier, for shared crawls fed
# from outside (0: close as soon as nothing is queued, leased or delayed).
FRONTIER_IDLE_WAIT = 0
# A finite crawl (FRONTIER_IDLE_WAIT 0) whose remaining URLs are all held for
# longer than this many seconds (a name whose lookups fail, an open breaker, a
# long Retry-After, an unreachable robots.txt) ends instead of waiting for them:
# they stay in the frontier, and the next run with the same JOBDIR or crawl id
# takes them up when due. The summary names them. (A site an operator paused
# keeps the crawl waiting for the resume.)
FRONTIER_HELD_WAIT = 20
# While URLs are queued and nothing is leased anywhere, an idle worker reads what
# is left every this many seconds: it decides whether only held work is left,
# and repairs a host that waits for nothing (a bug: counted in
# frontier/stalls_repaired and logged as a WARNING). 0: off.
FRONTIER_WATCHDOG_INTERVAL = 5.0
# Recurring crawls (the same crawl id, run again: a scheduled scrapyd job, or
# one worker with a long FRONTIER_IDLE_WAIT crawling on): a done URL is fetched
# again after FRONTIER_REVISIT_AFTER (seconds, or 7d, 12h, 30m; 0: never, each
# URL is fetched once), with If-None-Match / If-Modified-Since from its last
# answer. Unchanged (a 304, or the same payload digest) it waits FACTOR x
# longer next time, up to MAX; changed, FACTOR x shorter, down to MIN (0: AFTER
# / 4 and AFTER x 8). Seeds may have their own interval (0: AFTER). A host's
# new URLs are fetched before its revisits unless NEW_FIRST is off. The spider
# arguments revisit and revisit_seeds set AFTER and SEEDS for one job.
FRONTIER_REVISIT_AFTER = 0
FRONTIER_REVISIT_SEEDS = 0
FRONTIER_REVISIT_MIN = 0
FRONTIER_REVISIT_MAX = 0
FRONTIER_REVISIT_FACTOR = 1.5
FRONTIER_REVISIT_NEW_FIRST = True
# Off: revisits are fetched in full, never conditional. The archive stores an
# unchanged payload once either way; pywb replays a 304's revisit record as the
# 304 it was, an identical-payload one with the page.
FRONTIER_REVISIT_CONDITIONAL = True
# A worker that starts while Redis does not answer (restarting, failing over)
# waits this many seconds for it before giving up.
FRONTIER_CONNECT_WAIT = 60.0

# Learning from the pages (crawler/learning/, middlewares/learning.py): which
# query parameters are noise on a host, and which URL patterns are traps.
# A parameter is noise on a host once LEARN_MIN_EVIDENCE observations agree
# (a page whose canonical link drops it, a payload equal to the page's without
# it; canonical links alone must come from that many different pages) and
# none says otherwise (a canonical link that keeps it, a different payload).
# Then URLs of the host that differ only in it are one page: new links lose
# it, queued ones end as done "duplicate-variant" without a request. A host
# whose canonical links all point to one page teaches nothing by them.
# LEARN_MAX_FIELDS bounds the evidence kept per host; each worker reads a
# host's rules again after LEARN_RULES_TTL seconds without a page of it
# (each batch of its pages' evidence brings the host's rules back anyway).
LEARN_ENABLED = True
LEARN_MIN_EVIDENCE = 2
LEARN_MAX_FIELDS = 512
LEARN_RULES_TTL = 30.0
# Traps: a URL pattern of a host (the path with its numbers and ids as
# placeholders, any query as "?*") is refused ("trap-pattern") once
# LEARN_TRAP_ALIKE_PAGES of its pages, and LEARN_TRAP_ALIKE_SHARE of them,
# were near-duplicates of an earlier one (text sketches at most
# LEARN_TRAP_DISTANCE bits of 64 apart; a page of under 50 words has no
# sketch: near-empty pages look alike whatever they are, except at a dated URL,
# where a calendar's near-empty days say the same words but for their
# numbers). A catalogue whose pages differ is crawled in full. The static
# rules (ADMISSION_TRAP_*) stay the first line.
LEARN_TRAPS = True
LEARN_TRAP_ALIKE_PAGES = 15
LEARN_TRAP_ALIKE_SHARE = 0.5
LEARN_TRAP_DISTANCE = 8
# This worker's name in the frontier (heartbeats, leases, status, metrics,
# WARC file names); "" means hostname:pid, unique per live process.
FRONTIER_WORKER_ID = ""
# Seed lines pushed onto this Redis list (scrapy-redis's setting; %(name)s is
# the spider's name) are crawled by every worker of the frontier, also while
# it runs; "" turns the feed off. Taken in batches, never lost to a crash.
REDIS_START_URLS_KEY = "%(name)s:start_urls"
REDIS_START_URLS_BATCH_SIZE = 100
# How often an empty seed list is looked at again.
REDIS_START_URLS_POLL_SECONDS = 1.0
# The seed feed follows the spider's own start requests; closest to the spider,
# so fed seeds pass every other spider middleware as the spider's seeds do.
SPIDER_MIDDLEWARES = {
    "crawler.middlewares.seedfeed.SeedFeedMiddleware": 950,
    # After the feed (closer to the engine): fed seeds widen the scope too.
    "crawler.middlewares.scope.ScopeMiddleware": 900,
}
# Where the crawl may go (crawler/scope/rules.py, crawler/middlewares/scope.py):
# "domain" (the seeds' registered domains), "host" (their host names),
# "prefix" (each seed's SURT prefix) or "any" (the whole web). Links off
# scope are dropped before the frontier and counted (scope/rejected/RULE).
SCOPE = "domain"
# Links off scope still fetched this many links from a page in scope.
SCOPE_HOPS = 0
# Rules that refine the scope: re:REGEX, a URL or a SURT prefix; exclude wins.
SCOPE_INCLUDE: list[str] = []
SCOPE_EXCLUDE: list[str] = []
# The off-scope hosts linked most that a closing crawl logs.
SCOPE_REPORT_HOSTS = 20
# Under a shared frontier, links off scope are held (at most SCOPE_HELD_MAX)
# for this long after the worker starts, and as long again after another
# worker's seeds widen the scope: workers started together must not drop
# the links to each other's sites.
SCOPE_SETTLE_SECONDS = 10.0
SCOPE_HELD_MAX = 10_000
DOWNLOADER_MIDDLEWARES = {
    # The crawler's robots policy replaces Scrapy's middleware (same place).
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    "crawler.middlewares.robots.RobotsPolicyMiddleware": 100,
    # A redirect off the crawl's scope, before its robots.txt is asked for
    # (under Scrapy's scheduler; the frontier's intake decides it first).
    "crawler.middlewares.scoperedirect.ScopeRedirectMiddleware": 50,
    # Learned rules (a URL that is another spelling, a trap pattern) before
    # the robots check; the pages' evidence after decompression (590).
    "crawler.middlewares.learning.SiteLearningMiddleware": 90,
    # Retries wait in the frontier, honouring Retry-After (replaces Scrapy's).
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "crawler.middlewares.retry.RetryPolicyMiddleware": 550,
    # Archives responses as received: before redirects (600), decompression
    # (590) and retries (550) act on them.
    "crawler.middlewares.warc.WarcCaptureMiddleware": 650,
    # Conditional requests of revisits, and what each answer was (digest,
    # validator, 304): beside the WARC capture, so it reads the body as it came
    # (before decompression, 590) and the capture sees the headers it sent.
    "crawler.middlewares.revisit.RevisitMiddleware": 640,
    # Next to the downloader, so it sees every download error first.
    "crawler.middlewares.outcome.FrontierOutcomeMiddleware": 950,
    # Tallies every answer and download error for the crawl's report: nearest
    # the downloader, so it sees them as they came, before anyone acts on them.
    "crawler.middlewares.report.ReportMiddleware": 960,
    # Refuses non-public destinations. Above 950: its process_exception turns a
    # DNS answer the guarded resolver refused into a refusal before
    # FrontierOutcomeMiddleware notes it as an error and the retry policy
    # retries it. Below pacing: a refused request costs its host no start.
    "crawler.middlewares.addressguard.AddressGuardMiddleware": 955,
    # A failed lookup (not refused by the guard) becomes an outcome for its
    # host: held or parked in the frontier, never a retried download error, so
    # between the guard and FrontierOutcomeMiddleware.
    "crawler.middlewares.dns.DNSStepMiddleware": 952,
    # The last gate before a request leaves: spaces starts per host across workers.
    "crawler.middlewares.pacing.FrontierPacingMiddleware": 960,
}

# --- Breadth-first order ----------------------------------------------------
# Lower priority for deeper requests, FIFO within a priority: each host's
# queue is breadth-first, and the frontier serves hosts in turn by their
# next-allowed time. (The SCHEDULER_* queue settings below apply only if you
# switch back to Scrapy's own scheduler.)
DEPTH_PRIORITY = 1
SCHEDULER_DISK_QUEUE = "scrapy.squeues.PickleFifoDiskQueue"
SCHEDULER_MEMORY_QUEUE = "scrapy.squeues.FifoMemoryQueue"
SCHEDULER_PRIORITY_QUEUE = "scrapy.pqueues.DownloaderAwarePriorityQueue"

# --- Limits -----------------------------------------------------------------
# Breadth over depth: a broad crawl wants many hosts' important pages, not one
# host's archive. DEPTH_LIMIT counts links from a seed (seed = 0).
DEPTH_LIMIT = 10
DEPTH_STATS_VERBOSE = True
# Longer URLs are almost always generated (session ids, filters); 2083 is the
# historical browser limit that sites design for.
URLLENGTH_LIMIT = 2083
# The admission checks a request passes before the frontier (the cap below,
# URL length, the static trap rules ADMISSION_TRAP_*); False turns them off.
ADMISSION_ENABLED = True
# Distinct URLs admitted per host name (all its schemes and ports); bounds traps and huge
# sites so one host cannot eat the crawl. 0 = no cap.
ADMISSION_MAX_PAGES_PER_HOST = 10_000
# Budgets (the frontier's, for every worker; 0 = no limit): what one host name
# (every scheme and port) and one registered domain may spend in a crawl, in
# URLs fetched, bytes received and seconds since its first request. A spent
# host's queue ends as dead letters with reason "budget", and its new links are
# refused (raise the budget, then `scrapy frontier requeue --reason budget`).
BUDGET_HOST_PAGES = 0
BUDGET_HOST_BYTES = 0
BUDGET_HOST_SECONDS = 0
BUDGET_DOMAIN_PAGES = 0
BUDGET_DOMAIN_BYTES = 0
BUDGET_DOMAIN_SECONDS = 0
# Per-site settings (crawler/siterules.py): a file of JSON lines keyed by SURT
# prefix, e.g. {"site": "example.com", "delay": 2, "concurrency": 1,
# "budget_pages": 500, "scope": "include"}; `scrapy frontier rules FILE` loads
# one into a running crawl. "" = none.
SITE_RULES = ""
# Each link found to a queued URL raises it by one priority (one depth level),
# so that a budget buys a host's most linked pages: "auto" is on under a page
# budget (BUDGET_HOST_PAGES or BUDGET_DOMAIN_PAGES), True/False, or the
# priority one inlink adds. It keeps an index as large again as the queues.
FRONTIER_INLINK_PRIORITY = "auto"
# Trap heuristics (see crawler.admission.TrapRules); 0 switches a rule off.
ADMISSION_TRAP_MAX_SEGMENTS = 24
ADMISSION_TRAP_MAX_SEGMENT_REPEATS = 2
ADMISSION_TRAP_YEARS_PAST = 35
ADMISSION_TRAP_YEARS_FUTURE = 2
ADMISSION_TRAP_MAX_QUERY_PARAMS = 32
# The frontier applies the trap rules and the host budget (for all workers).
# With Scrapy's own scheduler, enable crawler.middlewares.admission.
# AdmissionMiddleware (at 850) to apply them in the process.

# --- The broad spider -------------------------------------------------------
# Seed lines without a scheme are errors unless the operator asks for http://.
BROAD_SEEDS_ADD_SCHEME = False
# <link rel=...> values followed as links besides <a> and <area>.
BROAD_LINK_RELS = ["canonical", "alternate"]
# Links with these extensions are not followed. Empty: an archive wants PDFs and
# other documents too; DOWNLOAD_MAXSIZE bounds what they cost.
BROAD_DENY_EXTENSIONS: list[str] = []
# Honour rel=nofollow and <meta name=robots content=nofollow>: site owners use
# them to fence off generated or private areas.
BROAD_OBEY_NOFOLLOW = True

# --- URLs -------------------------------------------------------------------
# One canonical form (crawler.urls) for dedup, robots and politeness. Tracking
# parameters in URL_STRIP_PARAMS are removed; None: the default list,
# crawler.urls.DEFAULT_STRIP_PARAMS. Add site-specific ones to the _EXTRA list.
URL_STRIP_PARAMS: list[str] | None = None
URL_STRIP_PARAMS_EXTRA: list[str] = []
REQUEST_FINGERPRINTER_CLASS = "crawler.urls.CanonicalRequestFingerprinter"

# --- Downloads --------------------------------------------------------------
# A page that takes 30 s is a page of a broken host; Scrapy's 180 s default
# lets a few hung hosts hold the whole crawl's concurrency.
DOWNLOAD_TIMEOUT = 30
# Connecting gets its own, shorter limit: a host whose SYNs go unanswered is
# known to be down in 10 s instead of holding a slot for the whole 30 s
# (crawler/handlers.py; 0 = connect within DOWNLOAD_TIMEOUT as Scrapy does).
DOWNLOAD_CONNECT_TIMEOUT = 10
# Bodies larger than 10 MiB are cut off (the response is dropped, counted as
# an error): a broad crawl wants pages, not disk images.
DOWNLOAD_MAXSIZE = 10 * 1024 * 1024
DOWNLOAD_WARNSIZE = 4 * 1024 * 1024
# Cookies tie requests to sessions: a broad crawl needs none and sites use them
# to build endless session URLs.
COOKIES_ENABLED = False
# Retries: see "Retries, backoff and circuit breakers" above.
RETRY_ENABLED = True
# Redirect chains longer than this are loops or traps.
REDIRECT_MAX_TIMES = 10
# Every status becomes an item (404s and 500s are part of the record of a
# crawl); the spider follows links only on 2xx HTML.
HTTPERROR_ALLOW_ALL = True

# --- DNS (crawler/dns/, crawler/middlewares/dns.py; README "DNS") -----------
# DNS is a step of its own: names resolve to IPv4 and IPv6 addresses (an
# IPv6-only host is crawled), each answer is checked by the address guard, and a
# name that does not resolve is an outcome for its host, not a download error
# retried URL by URL. Stats: dns/lookups/<result>, dns/hosts/parked/<kind>.
TWISTED_DNS_RESOLVER = "crawler.dns.CrawlResolver"
# Nameservers to ask, as IP addresses ("10.0.0.53", "10.0.0.53:5353",
# "[2001:db8::53]:53"), tried in turn: a caching resolver of your own keeps a
# broad crawl from hammering the provider's. Set, nothing else is ever asked
# (no /etc/hosts, no system resolver, no fallback). Empty: the machine's
# resolver (getaddrinfo in the reactor's threads).
DNS_NAMESERVERS: list[str] = []
# One lookup (A and AAAA at once, retransmissions included) gets this many
# seconds: a name whose servers stay silent is known within them, and costs its
# host a hold, not every URL a slot for the download timeout.
DNS_TIMEOUT = 5
# Thousands of hosts: cache many names (least recently used go first), each
# for its answer's TTL, but at least DNS_CACHE_MIN_TTL (some names say 0-30 s,
# and a broad crawl would ask for them at every page) and at most
# DNS_CACHE_MAX_TTL (a crawl runs for days; a host that moved is followed within
# the hour). The system's resolver gives no TTL: its answers are kept the minimum.
DNSCACHE_ENABLED = True
DNSCACHE_SIZE = 100_000
DNS_CACHE_MIN_TTL = 60
DNS_CACHE_MAX_TTL = 3600
# A name that does not exist (NXDOMAIN, confirmed by a second lookup) or has no
# address: its host's URLs become dead letters dns-nxdomain / dns-nodata at once.
# A nameserver that fails (SERVFAIL) or stays silent: the host is held, for
# every worker, 30 s doubling up to 10 min, its URLs waiting (no retry counted);
# after DNS_FAILED_MAX_ATTEMPTS failed lookups in a row (~15 min) they become
# dead letters dns-failed. Long enough that a nameserver hiccup loses nothing,
# short enough that a dead name does not keep a finite crawl open for long.
# While the nameservers answer nothing at all (an outage, not the name's
# fault) failures hold hosts without counting. Neither counts against the
# breaker; `scrapy frontier requeue --reason dns-failed` brings them back.
DNS_RETRY_BASE = 30.0
DNS_RETRY_MAX = 600.0
DNS_FAILED_MAX_ATTEMPTS = 6
# The reactor thread pool runs the system resolver's getaddrinfo (and other
# blocking calls): sized for many lookups at once so DNS is never the bottleneck.
REACTOR_THREADPOOL_MAXSIZE = 32

# --- Safety -----------------------------------------------------------------
# Scrapy 2.19 starts a remote-control endpoint that can run code; a crawler on
# a server must not expose one. The telnet console is the same risk.
REMOTE_CONTROL_ENABLED = False
TELNETCONSOLE_ENABLED = False

# --- Output -----------------------------------------------------------------
# Every response, as received (redirects, errors, retried answers and
# robots.txt included), is archived in WARC files with a CDXJ index each
# (crawler/middlewares/warc.py captures, crawler/pipelines/warc.py writes on
# its own thread). Files go to WARC_DIR, named
# PREFIX-TIMESTAMP-SERIAL-WORKER.warc.gz, ".open" while written, rotated past
# WARC_MAX_SIZE bytes. Not inside JOBDIR, whatever JOBDIR is: the archive is
# what the crawl produced, JOBDIR only its state, and deleting JOBDIR (how a
# crawl starts afresh) must not delete an archive. Resumed and fresh crawls
# add files next to the earlier ones (names never collide).
WARC_ENABLED = True
WARC_DIR = "output/warc"
WARC_PREFIX = "%(name)s"
WARC_MAX_SIZE = 1_000_000_000
# The writer thread's queue holds at most this many bytes of pages; a full
# queue makes downloads wait (a slow disk slows the crawl, memory stays flat).
WARC_QUEUE_MAX_BYTES = 64 * 1024 * 1024
# A 2xx payload already archived in this crawl (any worker, any run of the
# crawl id: the digest index is in the frontier) is written as a small
# "revisit" record; so is a 304 to a revisit's conditional request. Crawl ids
# naming the same WARC_DIGEST_INDEX share one index (a monthly crawl id does
# not archive again what last month's holds); "" keeps it the crawl's own.
# The index keeps at most WARC_DIGEST_INDEX_MAX digests (about 200 bytes each
# in Redis), forgetting those not seen for longest first.
WARC_REVISITS = True
WARC_DIGEST_INDEX = ""
WARC_DIGEST_INDEX_MAX = 2_000_000
# A page counts as done only once its records reached the OS; one that could
# not be written goes back to its queue and is fetched again. The file being
# written is fsynced every WARC_SYNC_INTERVAL seconds while records come, and
# at each rotation and close (a power loss costs at most that many seconds).
WARC_SYNC_INTERVAL = 10.0
# The disk guard (crawler/extensions/storage.py): below WARC_MIN_FREE free
# (bytes, "512MiB", "2GB", or "5%" of the filesystem) on WARC_DIR, JOBDIR (the
# embedded frontier's files) or a local feed's folder, this worker stops
# claiming URLs until there is room again (a tenth more than the minimum),
# and says so once; other workers carry on. Checked every
# STORAGE_CHECK_INTERVAL seconds (one statvfs per folder, on a thread).
WARC_MIN_FREE = "1GiB"
STORAGE_CHECK_INTERVAL = 1.0
# Who runs the crawl (a contact), and what it is for: in every file's warcinfo.
WARC_OPERATOR = ""
WARC_DESCRIPTION = ""
ITEM_PIPELINES = {"crawler.pipelines.warc.WarcPipeline": 300}

# When no feed is configured (no -o/-O, no FEEDS), every page's metadata (not
# its body) is written as JSON lines to this feed URI, with the WARC file and
# offset of its record. An empty value turns the default feed off.
BROAD_DEFAULT_FEED = "output/%(name)s-%(time)s.jsonl"
FEED_EXPORT_ENCODING = "utf-8"
# Local feed files (-o, -O, FEEDS, the default feed) write each row through to
# the OS before the page's lease can end in the frontier, so a kill -9 never
# loses the row of a page the frontier counts as done (crawler/feeds.py).
FEED_STORAGES = {
    "": "crawler.feeds.WriteThroughFileFeedStorage",
    "file": "crawler.feeds.WriteThroughFileFeedStorage",
}
# Fields of any feed that does not list its own (scrapyd's items_dir feed,
# -O pages.jsonl): the page metadata, never the body (it is in the WARC).
FEED_EXPORT_FIELDS = [
    "url", "final_url", "status", "content_type", "length", "fetched_at", "depth",
    "referrer", "redirects", "headers", "not_modified", "warc_file", "warc_offset",
]

# --- Metrics and progress ---------------------------------------------------
# /metrics for Prometheus from engine start to stop (crawler/extensions/
# prometheus.py). Loopback only unless you say otherwise; each worker on a
# machine takes the first free port of the range and logs it. Set
# PROMETHEUS_FILE_SD_DIR to a folder your Prometheus reads with file_sd_configs
# and every worker writes its own target there.
PROMETHEUS_ENABLED = True
PROMETHEUS_HOST = "127.0.0.1"
PROMETHEUS_PORT = "9410-9430"
PROMETHEUS_FILE_SD_DIR = ""
# Off loopback, let only Prometheus read them (docs/operations.md, "Metrics
# only Prometheus reads"): HTTPS with this PEM certificate (chain after the
# leaf) and key, both or neither; with a client CA, scrapers must present a
# certificate it signed; basic auth with this user and the password on the
# first line of the file (never on a command line), both or neither.
PROMETHEUS_TLS_CERT_FILE = ""
PROMETHEUS_TLS_KEY_FILE = ""
PROMETHEUS_TLS_CLIENT_CA_FILE = ""
PROMETHEUS_BASIC_AUTH_USER = ""
PROMETHEUS_BASIC_AUTH_PASSWORD_FILE = ""
# Seconds between reads of the shared frontier for metrics (one worker reads).
PROMETHEUS_FRONTIER_INTERVAL = 5.0

# --- Crawl reports --------------------------------------------------------------
# Every worker tallies its downloads (per host: pages, bytes, status codes,
# media types, errors, robots.txt; per seed: what became of it) and saves the
# tally in the frontier when it closes; then it writes the crawl's report,
# every worker's tallies and what the frontier still holds, into
# REPORT_DIR/<crawl> (hosts.csv, seeds.csv, statuses.csv, mimes.csv,
# left.csv, off_scope.csv, report.json, report.html). scrapy frontier report
# writes it again on demand.
REPORT_ENABLED = True
REPORT_DIR = "output/reports"

# --- The operator's console (scrapy frontier serve) --------------------------
# A web page over the frontier scrapy frontier reads, in its own process:
# counts, pace, workers, hosts, dead letters and refusals, and live control
# of hosts and domains. Bound to loopback unless told otherwise; off
# loopback it takes the metrics' TLS and basic-auth settings above
# (PROMETHEUS_TLS_*, PROMETHEUS_BASIC_AUTH_*), and warns without them.
CONSOLE_HOST = "127.0.0.1"
CONSOLE_PORT = "9440-9449"
# Seconds between the samples of the console's charts of the last hour.
CONSOLE_SAMPLE_SECONDS = 10.0
# Seconds between a worker's writes of its recent fetches per host and its
# download errors by kind, which the console shows (one HSET; 0: never).
CONSOLE_LIVE_SECONDS = 5.0
EXTENSIONS = {
    # First: the crawl does not start on a Scrapy or Twisted whose private
    # names, which crawler/compat.py uses, changed (it names what and why).
    "crawler.compat.CompatibilityCheck": -100,
    # The progress line (pages, useful pages, errors, frontier, hosts)
    # replaces Scrapy's LogStats, every LOGSTATS_INTERVAL seconds.
    "scrapy.extensions.logstats.LogStats": None,
    "crawler.extensions.progress.ProgressLog": 0,
    "crawler.extensions.prometheus.PrometheusExtension": 0,
    "crawler.extensions.looplag.ReactorLag": 0,
    # The disk guard: no claims while WARC_DIR, JOBDIR or a feed's folder is
    # short of room (WARC_MIN_FREE) or the archive cannot write.
    "crawler.extensions.storage.StorageGuard": 0,
    # The end-of-crawl summary (pages, hosts, dead letters, where the items and
    # the archive are), after Scrapy's stats dump; and the "every seed was
    # refused" warning.
    "crawler.extensions.summary.CrawlSummary": 0,
}
# The summary block (crawler/extensions/summary.py); distinct hosts are counted
# exactly up to CRAWL_SUMMARY_MAX_HOSTS (memory), then shown as "at least".
CRAWL_SUMMARY_ENABLED = True
CRAWL_SUMMARY_MAX_HOSTS = 100_000
# The progress line shows an interval's error rate only over at least this
# many finished downloads ("-" below: 1 timeout of 1 is not "100% errors").
PROGRESS_MIN_ERROR_SAMPLE = 20
# Reactor lateness (crawler/extensions/looplag.py): a timer every
# LOOPLAG_INTERVAL seconds (0 turns it off) measures how late the reactor runs
# (stats reactor/lag_max, reactor/stalls over LOOPLAG_STALL); a stall of
# LOOPLAG_LOG seconds or more is logged as a warning with its time window.
LOOPLAG_INTERVAL = 0.05
LOOPLAG_STALL = 0.1
LOOPLAG_LOG = 1.0

# --- Logs -------------------------------------------------------------------
# DEBUG logs a line per request: unreadable at broad-crawl rates.
LOG_LEVEL = "INFO"
