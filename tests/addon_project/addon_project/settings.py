"""Settings of a project that uses the broad crawler as an add-on, and little else.

No scheduler, middleware, pipeline or robots setting here: the add-on brings
them. The identity is this project's own (the robots policy matches
robots.txt groups against the product token of USER_AGENT).
"""

BOT_NAME = "addon_project"
SPIDER_MODULES = ["addon_project.spiders"]
NEWSPIDER_MODULE = "addon_project.spiders"
USER_AGENT = "AddonBot/1.0 (+https://example.invalid/addon-bot)"

ADDONS = {"crawler.addon.BroadCrawlAddon": 100}
