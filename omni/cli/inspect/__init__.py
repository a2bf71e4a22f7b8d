"""`omni ls | show | tail | replay | stats`: the log read for people, straight from the file
(with the server up, stopped or killed), never written."""
