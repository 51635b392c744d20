"""The producer library; import it from :mod:`feed_service.producer`."""
