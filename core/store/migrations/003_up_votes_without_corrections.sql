-- a thumbs-up approves the answer as sent and carries no correction; a vote changed from down
-- to up before that rule kept the down vote's, which the review queue showed beside it
UPDATE ratings SET correction = NULL WHERE rating = 'up' AND correction IS NOT NULL;
