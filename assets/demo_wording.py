"""The wording of TuneDesk's demo data: every phrase the demo rows are made of.

``make_demo_data.py`` reads these tables and does the rest (dressing the asks up as customer
messages, combining the answers, checking them, writing the files); edit a phrasing here and
run it again. Plain data, standard library only.
"""

# Phrases no answer may contain; also every golden prompt's must_not_contain.
NEVER_SAY = ["as an ai language model", "i cannot help", "i can't help with that", "i'm just an ai"]
# "" entries weight the choice towards rows without an opener/closer.
OPENERS = ["", "", "", "", "hi", "hello", "hello there", "hey", "hi there", "good morning",
           "good afternoon", "good evening", "yo", "excuse me"]  # fmt: skip
CLOSERS = ["", "", "", "", "please", "asap", "thanks", "thank you", "?", "thx", "pls",
           "thanks in advance", "can you help?", "!"]  # fmt: skip
LEADS = ["Here's what you need to know:", "Here's how it works:", "Here are the details:"]
CLOSINGS = [
    "Is there anything else I can help you with today?",
    "If you have any other questions, I'm here to help.",
    "Let me know if there's anything else I can do for you.",
    "Feel free to reach out if you need any further assistance.",
    "I'm happy to help with anything else you need.",
    "If anything is unclear, just let me know and I'll be glad to help further.",
]

# One block per intent: "== intent CATEGORY | key phrase; key phrase", then
# "ask:" user phrasings (several per line, split on " | "), "ack:" opening sentences,
# "step:" the numbered steps (in order) and "tip:" closing hints. Every response of an
# intent contains all of its key phrases (make_demo_data.py checks), so golden.jsonl can test them.
INTENTS = """
== cancel_order ORDER | cancel; order number
ask: I want to cancel my order {{Order Number}} | cancel order {{Order Number}} | how do I cancel an order?
ask: I need to cancel the order I placed yesterday | can you help me cancel order {{Order Number}}
ask: I changed my mind, how can I cancel my purchase? | is it possible to cancel order {{Order Number}}?
ask: I would like to cancel the last thing I ordered | help me cancel an order I made by mistake
ask: where do I go to cancel my order? | I have to cancel order {{Order Number}} before it ships
ask: I don't want my order anymore, cancel it
ack: I understand you'd like to cancel order {{Order Number}}, and I'm happy to help you with that.
ack: Thanks for letting us know you want to cancel your order {{Order Number}}. I'll walk you through it.
ack: I'm sorry to hear you need to cancel order {{Order Number}}, but it's quick to do.
step: Log in to your account on {{Online Company Portal Info}}.
step: Open the "My Orders" section.
step: Find order {{Order Number}} and select "Cancel Order".
step: Confirm the cancellation; you'll receive a confirmation email shortly.
tip: If the order has already shipped, the cancel option may not appear, so call us at {{Customer Support Phone Number}} and we'll sort it out.
tip: Orders can usually be cancelled free of charge until they leave our warehouse, so it's best to act quickly.

== change_order ORDER | change; order number
ask: I need to change my order {{Order Number}} | how can I change the items in my order?
ask: I want to add something to order {{Order Number}} | can I modify my order after placing it?
ask: change the size on order {{Order Number}} | I ordered the wrong color, can I change it?
ask: I need to remove an item from my order | is it too late to edit order {{Order Number}}?
ask: help me update the quantity in my order | I want to swap a product in my last order
ask: how do I make changes to an order I already placed
ack: I understand you'd like to make a change to order {{Order Number}}. I'm glad to help you with that.
ack: Thanks for reaching out about changing your order {{Order Number}}. Let's get it updated for you.
ack: No problem, most orders like {{Order Number}} can be edited in a few clicks.
step: Sign in to {{Online Company Portal Info}} and go to "My Orders".
step: Select order {{Order Number}} and click "Edit Order".
step: Add, remove or adjust the items, sizes or quantities you need.
step: Review the new total and save your changes.
tip: Changes are only possible while the order is still being processed; once it ships, we can help with a return or exchange instead.
tip: If the edit button is greyed out, call us at {{Customer Support Phone Number}} and an agent can change it for you.

== place_order ORDER | place; checkout
ask: I want to place an order | how do I buy something on {{Website URL}}? | I'd like to order a few items
ask: can you help me place an order for a gift? | how can I make a purchase?
ask: I need help ordering from your website | what's the easiest way to place an order?
ask: I'm trying to buy a product but don't know how | can I place an order over the phone?
ask: walk me through making an order | I want to purchase something from your store
ack: Thanks for choosing to shop with us! I'd be glad to help you place your order.
ack: I'm happy to help you place an order. It only takes a few minutes.
ack: Great, let's get your order placed on {{Website URL}}.
step: Visit {{Website URL}} and browse or search for the items you want.
step: Select the size, color and quantity, then click "Add to Cart".
step: Open your cart and click "Proceed to Checkout".
step: Enter your shipping address and payment details, then confirm the order.
tip: You'll receive an email with your {{Order Number}} as soon as checkout is complete.
tip: If anything goes wrong at checkout, our team at {{Customer Support Phone Number}} can place the order with you by phone.

== track_order ORDER | tracking; order number
ask: where is my order {{Order Number}}? | track order {{Order Number}} | how can I track my package?
ask: I want to know the status of my order | has my order {{Order Number}} shipped yet?
ask: when will my order arrive? it's {{Order Number}} | I can't find my tracking number
ask: my order hasn't arrived, where is it? | can you check where my package is?
ask: I'd like an update on order {{Order Number}} | how do I see the shipping status of my purchase?
ack: I understand you want to know where order {{Order Number}} is, and I'll help you check it.
ack: Thanks for reaching out! Tracking order {{Order Number}} is easy, and I'm happy to guide you.
ack: I know waiting for a package can be stressful, so let's check on order {{Order Number}} together.
step: Log in to {{Online Company Portal Info}} and open "My Orders".
step: Select order {{Order Number}} to see its current status.
step: Click "Track Package" to view the tracking details from the carrier.
step: Use the tracking number in your shipping confirmation email for live updates.
tip: Tracking information can take up to 24 hours to appear after your order ships.
tip: If the tracking status hasn't changed in several days, let us know and we'll contact the carrier for you.

== get_refund REFUND | refund; refund amount
ask: I want a refund for order {{Order Number}} | how do I get my money back? | request refund
ask: I need a refund of {{Refund Amount}} | can I get a refund for a damaged item?
ask: the product was faulty and I want a refund | I returned my order, how do I get refunded?
ask: please refund {{Refund Amount}} to my card | I'd like to get reimbursed for my purchase
ask: how can I ask for a refund? | I was charged for something I never received, I want my money back
ack: I understand you'd like a refund, and I'm here to help you get your {{Refund Amount}} back.
ack: I'm sorry your purchase didn't work out. Let's get your refund of {{Refund Amount}} started.
ack: Thanks for contacting us about a refund. I'll explain how to request your {{Refund Amount}}.
step: Sign in to {{Online Company Portal Info}} and open "My Orders".
step: Select order {{Order Number}} and choose "Request a Refund".
step: Pick the reason for the refund and add photos if the item was damaged.
step: Submit the request; you'll get an email once it has been approved.
tip: Approved refunds go back to your original payment method and usually appear within 5-10 business days.
tip: Keep your receipt and order number handy in case our team needs to verify the refund amount.

== check_refund_policy REFUND | refund policy; eligible
ask: what is your refund policy? | can I return something after 30 days?
ask: how long do I have to ask for a refund? | do you give refunds on sale items?
ask: I want to know your refund rules | are refunds possible for digital products?
ask: what items are eligible for a refund? | tell me about the money back policy
ask: is there a time limit for refunds? | do I get a full refund if I return an opened item?
ack: Of course! I'm happy to explain our refund policy so you know exactly what to expect.
ack: Great question. I'm glad to give you a quick summary of our refund policy.
ack: I understand you want to check our refund policy before making a decision, and I'm glad to help.
step: Most items are eligible for a full refund within 30 days of delivery.
step: Items must be unused and returned in their original packaging.
step: Sale items are eligible for store credit; digital downloads are refundable only if they haven't been accessed.
step: Refunds are issued to the original payment method once the return is inspected.
tip: You can read the full refund policy at {{Website URL}}.
tip: If you're not sure whether your item is eligible, send us the order number and we'll check for you.

== track_refund REFUND | refund; status
ask: where is my refund? | I'm still waiting for my refund of {{Refund Amount}} | check refund status
ask: when will I get my money back for order {{Order Number}}? | has my refund been processed yet?
ask: it's been two weeks and no refund | how can I see if my refund went through?
ask: my refund hasn't shown up on my card | track my refund
ask: I returned the item but haven't been reimbursed
ack: I understand you're waiting for your refund of {{Refund Amount}}, and I'll help you check its status.
ack: Thanks for your patience! Let's look at the status of your refund together.
ack: I'm sorry the refund is taking longer than expected. Let's see where it stands.
step: Log in to {{Online Company Portal Info}} and go to "Returns & Refunds".
step: Select order {{Order Number}} to see the refund status.
step: If it says "Refund Issued", check your bank or card statement for {{Refund Amount}}.
step: If it still says "Processing", the return is being inspected by our warehouse team.
tip: Banks can take 5-10 business days to show a refund after we issue it.
tip: If the status hasn't changed after 10 business days, call us at {{Customer Support Phone Number}} and we'll investigate.

== change_shipping_address SHIPPING | shipping address; update
ask: I need to change my shipping address | can I update the delivery address for order {{Order Number}}?
ask: I moved to {{Delivery City}}, how do I change my address? | wrong shipping address on my order
ask: change the address to {{Delivery City}} | how do I edit the address on my order?
ask: I entered the wrong address by mistake | ship my order to a different address
ask: can you send my package to {{Delivery City}} instead? | I want to update where my order is going
ack: I understand you need to update the shipping address, and I'm happy to help.
ack: No problem! Let's update the shipping address so your order reaches you in {{Delivery City}}.
ack: Thanks for letting us know. Updating your shipping address is quick while the order hasn't shipped yet.
step: Log in to {{Online Company Portal Info}} and open "My Orders".
step: Select order {{Order Number}} and click "Change Shipping Address".
step: Enter the new address in {{Delivery City}} and save it.
step: Check the confirmation email to make sure the update went through.
tip: If your order has already shipped, we can ask the carrier to redirect it, though this isn't always possible.
tip: To avoid this next time, you can save a default address under "Account Settings".

== set_up_shipping_address SHIPPING | shipping address; save
ask: how do I add a shipping address? | I want to set up a new delivery address | set up shipping address
ask: can I save more than one shipping address? | add an address in {{Delivery City}} to my account
ask: where do I set my default shipping address? | I need to register a shipping address
ask: help me add my work address for deliveries | how can I store my address so I don't type it every time?
ask: I'm trying to add an address but it won't work
ack: I'd be glad to help you set up a shipping address on your account.
ack: Setting up a shipping address only takes a minute, and I'm happy to walk you through it.
ack: Thanks for asking! Saving a shipping address makes checkout much faster.
step: Sign in to {{Online Company Portal Info}} and go to "Account Settings".
step: Open "Shipping Addresses" and click "Add New Address".
step: Enter the full address, including {{Delivery City}} and the postal code.
step: Click "Save" and, if you like, mark it as your default address.
tip: You can save several addresses and choose between them at checkout.
tip: If the form won't accept your address, double-check the postal code or contact us at {{Customer Support Phone Number}}.

== delivery_options DELIVERY | delivery options; standard
ask: what delivery options do you have? | do you offer express shipping? | I want faster delivery
ask: can I get next day delivery to {{Delivery City}}? | what are the shipping methods?
ask: is there a cheaper way to ship? | do you deliver to {{Delivery City}}?
ask: can I pick up my order in store? | which delivery options can I choose at checkout?
ask: how much does express delivery cost?
ack: Thanks for asking! I'm happy to go over the delivery options we offer.
ack: I'm glad to explain our delivery options so you can pick the one that suits you.
ack: Great question. Depending on where you are, you can choose from several delivery options.
step: Standard delivery: arrives in 3-5 business days.
step: Express delivery: arrives in 1-2 business days for an extra fee.
step: Next-day delivery: available in {{Delivery City}} and most major cities for orders placed before 2 pm.
step: In-store pickup: free, usually ready within 24 hours.
tip: Available delivery options and prices are shown at checkout once you enter your address.
tip: Standard delivery is free on orders over a certain amount; see {{Website URL}} for details.

== delivery_period DELIVERY | business days; delivery
ask: how long does delivery take? | when will my order {{Order Number}} be delivered?
ask: how many days until I get my package? | what's the delivery time to {{Delivery City}}?
ask: will my order arrive before the weekend? | how soon can I expect my purchase?
ask: estimated delivery date for my order | how long is shipping usually?
ask: does delivery take long? | when should my package get here?
ack: I understand you want to know when to expect your delivery, and I'm happy to help.
ack: Thanks for your question! I'm glad to explain how long delivery usually takes.
ack: I know you're eager to receive your order, so let me explain what to expect for delivery.
step: Standard delivery takes 3-5 business days after your order ships.
step: Express delivery takes 1-2 business days.
step: Orders to {{Delivery City}} and other remote areas may need 1-2 extra business days.
step: You can see the estimated date for order {{Order Number}} in "My Orders" on {{Online Company Portal Info}}.
tip: Orders placed on weekends or holidays start processing the next business day.
tip: We'll email you a tracking link as soon as your order leaves our warehouse.

== check_payment_methods PAYMENT | payment methods; paypal
ask: what payment methods do you accept? | can I pay with PayPal? | do you take Apple Pay?
ask: which cards can I use? | can I pay in installments? | is cash on delivery available?
ask: how can I pay for my order? | do you accept debit cards? | what are the ways to pay?
ask: can I use a gift card to pay?
ack: Thanks for asking! We accept several payment methods to make checkout easy.
ack: I'm happy to tell you about the payment methods we accept.
ack: Great question. I'm glad to list the payment methods available on {{Website URL}}.
step: Credit and debit cards: Visa, Mastercard and American Express.
step: PayPal, for a quick checkout without entering card details.
step: Apple Pay and Google Pay on supported devices.
step: Gift cards and store credit, which can be combined with another payment method.
tip: All payment methods are processed securely, and we never store your full card details.
tip: Available payment methods can vary by country and are shown at checkout.

== payment_issue PAYMENT | payment; sorry
ask: my payment was declined | I can't pay for my order | there's a problem with my payment
ask: I was charged twice for order {{Order Number}} | why did my card get rejected?
ask: payment failed at checkout | my payment keeps failing on {{Website URL}}
ask: I got an error when paying | the money left my account but the order wasn't placed
ask: help, my credit card isn't working on your site
ack: I'm sorry you're having trouble with your payment. Let's get it sorted out.
ack: I'm really sorry about the payment issue. I understand how frustrating that can be.
ack: Sorry to hear your payment didn't go through. A few quick checks usually fix it.
step: Check that your card number, expiry date, CVV and billing address are entered correctly.
step: Make sure your card has enough funds and isn't blocked for online purchases.
step: Try another payment method, such as PayPal or a different card.
step: Clear your browser cache or try the mobile app, then try again.
tip: If you were charged twice, the duplicate payment is usually released by your bank within 3-5 business days.
tip: If the problem continues, contact our billing team at {{Customer Support Phone Number}} with your order number.

== check_invoice INVOICE | invoice; invoice number
ask: I want to check my invoice | can I see invoice {{Invoice Number}}? | show me my bill
ask: where can I view my invoices? | I need to look at the invoice for order {{Order Number}}
ask: there's something wrong on invoice {{Invoice Number}} | how do I find my past invoices?
ask: I want to check the details of my invoice | can you check invoice {{Invoice Number}} for me
ask: where is the invoice for my last purchase?
ack: I'd be happy to help you check invoice {{Invoice Number}}.
ack: Thanks for reaching out! Checking invoice {{Invoice Number}} is simple.
ack: I understand you want to review invoice {{Invoice Number}}, and I'm here to help.
step: Sign in to {{Online Company Portal Info}} and open "Billing".
step: Go to "Invoices" to see a list of all your invoices.
step: Select invoice {{Invoice Number}} to view the items, taxes and totals.
step: Compare the details with order {{Order Number}} to confirm everything is correct.
tip: If you notice a mistake on the invoice, reply with the invoice number and we'll correct it.
tip: Invoices are usually available within 24 hours of your order being placed.

== get_invoice INVOICE | invoice; download
ask: I need a copy of my invoice | how do I download invoice {{Invoice Number}}? | get invoice {{Invoice Number}}
ask: send me the invoice for order {{Order Number}} | can I get a PDF invoice?
ask: I need an invoice for my company | where can I get a receipt for my purchase?
ask: email me my invoice | I lost my invoice, can I get another one?
ask: I need the invoice for tax purposes
ack: Of course! I'll help you get a copy of invoice {{Invoice Number}}.
ack: I understand you need your invoice, and getting it only takes a moment.
ack: Thanks for asking! You can download invoice {{Invoice Number}} at any time.
step: Log in to {{Online Company Portal Info}} and open "Billing".
step: Click "Invoices" and find invoice {{Invoice Number}}.
step: Click "Download PDF" to save or print it.
step: To receive it by email instead, click "Send to my email".
tip: If you need a company name or VAT number added to the invoice, let us know before you download it.
tip: Invoices for older orders can also be requested by calling {{Customer Support Phone Number}}.

== create_account ACCOUNT | account; sign up
ask: I want to create an account | how do I sign up? | can you help me open a new account?
ask: I'd like to register on {{Website URL}} | create a {{Account Type}} account for me
ask: how can I make an account? | where do I register? | I want to join as a new customer
ask: open account | I need a {{Account Type}} account
ack: Welcome! I'm happy to help you create your {{Account Type}} account.
ack: Thanks for your interest in joining us! Creating an account takes just a few minutes.
ack: Great to have you with us! Setting up your new account is easy.
step: Go to {{Website URL}} and click "Sign Up".
step: Enter your name, email address and a strong password.
step: Choose the {{Account Type}} account that fits your needs.
step: Confirm your email address using the link we send you.
tip: Once your account is active, you can track orders, save addresses and check out faster.
tip: If you don't receive the confirmation email, check your spam folder or ask us to resend it.

== delete_account ACCOUNT | delete; account
ask: I want to delete my account | how do I close my {{Account Type}} account?
ask: remove my account and data | can you delete my profile? | I don't want an account anymore
ask: how can I deactivate my account? | delete my account permanently | I need to close my account
ask: I want you to erase all my personal information | terminate my {{Account Type}} account
ack: I'm sorry to see you go, but I understand you'd like to delete your account.
ack: Thanks for letting us know. I can explain how to delete your {{Account Type}} account.
ack: I understand you want to delete your account, and I'll make the process as simple as possible.
step: Log in to {{Online Company Portal Info}} and open "Account Settings".
step: Select "Privacy" and then "Delete Account".
step: Confirm your identity with your password or a code sent to your email.
step: Confirm the deletion; your account and personal data will be removed within 30 days.
tip: Make sure you have no open orders or pending refunds, as these can't be managed after deletion.
tip: If you change your mind, you can log back in within 30 days to stop the deletion.

== edit_account ACCOUNT | account; profile
ask: I want to edit my account details | how do I change my email address? | edit my profile
ask: can I update my phone number? | I need to change the name on my account
ask: how do I update my personal information? | I want to change my {{Account Type}} account details
ask: where can I modify my account info? | my details are out of date, how do I fix them?
ask: change my contact details
ack: I'm happy to help you edit your account details.
ack: Thanks for keeping your account up to date! Editing your profile is quick.
ack: I understand you want to update your account information, and it's quick to do.
step: Sign in to {{Online Company Portal Info}}.
step: Click your name and open "Profile".
step: Edit your name, email address, phone number or other details.
step: Click "Save Changes" and confirm any email change using the link we send.
tip: For security, some changes may ask you to re-enter your password.
tip: If you can't edit a field, contact us at {{Customer Support Phone Number}} and we'll update it for you.

== recover_password ACCOUNT | password; reset
ask: I forgot my password | how do I reset my password? | I can't log in to {{Online Company Portal Info}}
ask: recover password | I'm locked out of my account | the password reset email never came
ask: help me get back into my account | I need a new password | my password isn't working
ask: how can I recover access to my {{Account Type}} account?
ack: I'm sorry you're having trouble signing in. Let's reset your password so you can get back in.
ack: No worries, forgetting a password happens to everyone, and it's easy to reset.
ack: I understand how frustrating it is to be locked out, and I'll help you reset your password.
step: Go to {{Online Company Portal Info}} and click "Forgot Password".
step: Enter the email address linked to your account.
step: Open the password reset email and click the link inside.
step: Choose a new, strong password and log in again.
tip: The reset link expires after 24 hours; check your spam folder if you don't see it.
tip: If the reset email never arrives, call us at {{Customer Support Phone Number}} and we'll verify your identity.

== switch_account ACCOUNT | switch; account type
ask: I want to switch to the {{Account Type}} account | how do I change my account type?
ask: can I upgrade to {{Account Type}}? | switch account | I'd like to downgrade my account
ask: move me to a {{Account Type}} plan | how can I switch between accounts?
ask: I want to change from a personal to a business account | can I switch my account to {{Account Type}}?
ask: what do I need to do to switch my plan?
ack: I'd be glad to help you switch to the {{Account Type}} account.
ack: Thanks for reaching out! Switching your account type is easy.
ack: I understand you'd like to switch accounts, and I'm here to help.
step: Log in to {{Online Company Portal Info}} and open "Account Settings".
step: Select "Account Type" to see the available options.
step: Choose {{Account Type}} and review its features and price.
step: Click "Switch" to confirm; the change takes effect right away.
tip: Your order history, saved addresses and preferences will stay the same after you switch.
tip: If you switch in the middle of a billing period, the price difference is prorated automatically.

== registration_problems ACCOUNT | registration; sorry
ask: I can't register | the sign up form isn't working | registration error
ask: I'm having problems registering on {{Website URL}} | it says my email is already in use
ask: I never got the confirmation email after signing up | why can't I create an account?
ask: the registration page keeps giving me an error | I tried to sign up but nothing happens
ask: I can't finish my registration
ack: I'm sorry you're having trouble with your registration. Let's fix it together.
ack: Sorry about the registration problem! I understand how annoying that is.
ack: I'm sorry the registration isn't working for you. A few things usually help.
step: Make sure all required fields are filled in and your password meets the requirements.
step: If your email is already in use, try "Forgot Password" instead of signing up again.
step: Check your spam folder for the confirmation email, or ask us to resend it.
step: Clear your browser cache or try a different browser or device.
tip: If nothing works, send us a screenshot of the error and we'll complete the registration with you.
tip: You can also call {{Customer Support Phone Number}} and an agent will help you register by phone.

== complaint FEEDBACK | sorry; complaint
ask: I want to make a complaint | I'm very unhappy with your service | how do I file a complaint?
ask: your delivery driver was rude | I received a broken item and nobody helped me
ask: this is the worst customer service ever | I want to complain about order {{Order Number}}
ask: I'm not satisfied with my purchase | who do I talk to about a complaint?
ask: I've been waiting for weeks and I'm really frustrated
ack: I'm really sorry about your experience, and I understand why you'd want to make a complaint.
ack: I'm sorry to hear you're unhappy. Thank you for telling us; your complaint matters to us.
ack: I'm sorry we let you down, and I want to make sure your complaint is handled properly.
step: Share what happened, including order {{Order Number}} if it's related to an order.
step: We'll log your complaint and send you a reference number by email.
step: A member of our customer care team will review it within 2 business days.
step: We'll contact you with a solution, such as a replacement or refund.
tip: You can also submit a complaint through the "Contact Us" form on {{Website URL}}.
tip: If you prefer to talk to someone, call us at {{Customer Support Phone Number}} during {{Customer Support Hours}}.

== review FEEDBACK | feedback; review
ask: I want to leave a review | how can I give feedback about a product? | where do I write a review?
ask: I'd like to share my opinion about your service | can I rate my purchase?
ask: I want to leave feedback on order {{Order Number}} | I loved the product, where can I say so?
ask: how do I submit a review? | I have some suggestions for your company | I want to review my last order
ack: Thank you for wanting to share your feedback! We really value every review.
ack: We love hearing feedback from customers, so thanks for taking the time to leave a review.
ack: I appreciate you wanting to share your thoughts. Your feedback helps us improve.
step: Log in to {{Online Company Portal Info}} and open "My Orders".
step: Find the product you bought and click "Write a Review".
step: Give it a star rating and tell us what you liked or what we could do better.
step: Submit your review; it will appear on {{Website URL}} after a quick check.
tip: For feedback about our service rather than a product, you can use the "Contact Us" form.
tip: Every review is read by our team and helps other customers choose.

== contact_customer_service CONTACT | customer service; phone number
ask: how can I contact customer service? | what's your customer service phone number?
ask: I need to talk to customer support | when is customer service open? | do you have live chat?
ask: how do I reach your support team? | is there a number I can call? | what are your support hours?
ask: I want to get in touch with customer service | can I email customer support?
ask: I called {{Customer Support Phone Number}} but nobody answered
ack: I'm happy to help you get in touch with customer service.
ack: Thanks for reaching out! Our customer service team is here for you.
ack: Of course! There are several easy ways to contact customer service.
step: Call us at {{Customer Support Phone Number}} during {{Customer Support Hours}}.
step: Chat with us using {{Live Chat Support}} on {{Website URL}}.
step: Send a message through the "Contact Us" form on {{Online Company Portal Info}}.
step: Email us and we'll reply within one business day.
tip: Having your order number ready helps us assist you faster.
tip: Live chat usually has the shortest wait time.

== contact_human_agent CONTACT | connect you with; human agent
ask: I want to talk to a human | can I speak to a real person? | connect me to an agent
ask: I need a human agent | stop the bot, get me a person | is there a live agent I can talk to?
ask: transfer me to a representative | I'd rather talk to someone real
ask: let me speak with a human agent | how do I reach an actual person?
ack: Of course! I'll connect you with a human agent right away.
ack: I understand you'd prefer to talk to a person. Let me connect you with a human agent.
ack: No problem at all. I'm happy to connect you with a human agent who can help.
step: Stay in this chat and I'll transfer you to the next available human agent.
step: Or call {{Customer Support Phone Number}} and say "agent" to skip the menu.
step: Have your order number or account email ready so the agent can help faster.
tip: Our human agents are available during {{Customer Support Hours}}.
tip: Wait times are usually under five minutes, and you'll keep your place in the queue.

== newsletter_subscription SUBSCRIPTION | newsletter; subscribe
ask: I want to subscribe to your newsletter | how do I sign up for the newsletter?
ask: unsubscribe me from the newsletter | I get too many emails, how do I stop them?
ask: can I get your weekly deals by email? | how do I join the mailing list?
ask: stop sending me newsletters | I'm not receiving the newsletter anymore
ask: subscribe me to the newsletter | how can I manage my email subscriptions?
ack: I'd be happy to help with your newsletter subscription.
ack: Thanks for your interest in our newsletter! Managing it is simple.
ack: Sure! You can subscribe to or unsubscribe from the newsletter at any time.
step: Log in to {{Online Company Portal Info}} and open "Account Settings".
step: Go to "Email Preferences".
step: Tick "Newsletter" to subscribe, or untick it to unsubscribe.
step: Click "Save"; changes take effect within 24 hours.
tip: You can also unsubscribe with one click using the link at the bottom of any newsletter.
tip: Newsletter subscribers get early access to sales and exclusive discounts.

== check_cancellation_fee CANCEL | cancellation fee; terms
ask: is there a cancellation fee? | how much does it cost to cancel? | check cancellation fee
ask: will I be charged if I cancel my order? | what's the fee for cancelling my {{Account Type}} plan?
ask: do you charge for cancellations? | can I cancel for free? | I want to know the cancellation charges
ask: what happens if I cancel early, do I pay something? | are there any penalties for canceling order {{Order Number}}?
ack: Great question! I'm happy to explain our cancellation fee so there are no surprises.
ack: I understand you want to check the cancellation fee before deciding, and I'm here to help.
ack: Thanks for asking about the cancellation fee. It depends on what you're cancelling.
step: Orders cancelled before they ship have no cancellation fee.
step: Orders cancelled after shipping may have a return shipping charge deducted from the refund.
step: {{Account Type}} plans ended before the contract period is over may have an early cancellation fee.
step: You can see the exact amount under "Billing" on {{Online Company Portal Info}} before you confirm.
tip: The full cancellation terms are available at {{Website URL}}.
tip: If you're unsure about the terms, our team at {{Customer Support Phone Number}} can check your case.
"""  # noqa: E501

# The help center's article title for each intent (demo_help_center.md: its steps and tips).
ARTICLE_TITLES = {
    "cancel_order": "Cancelling an order",
    "change_order": "Changing an order you placed",
    "place_order": "Placing an order",
    "track_order": "Tracking an order",
    "get_refund": "Asking for a refund",
    "check_refund_policy": "Our refund policy",
    "track_refund": "Where is my refund?",
    "change_shipping_address": "Changing the shipping address of an order",
    "set_up_shipping_address": "Adding a shipping address to your account",
    "delivery_options": "Delivery options",
    "delivery_period": "How long delivery takes",
    "check_payment_methods": "Payment methods we accept",
    "payment_issue": "When a payment fails",
    "check_invoice": "Viewing your invoices",
    "get_invoice": "Getting a copy of an invoice",
    "create_account": "Creating an account",
    "delete_account": "Deleting your account",
    "edit_account": "Editing your account details",
    "recover_password": "Resetting a forgotten password",
    "switch_account": "Switching to another account type",
    "registration_problems": "Problems signing up",
    "complaint": "Making a complaint",
    "review": "Writing a product review",
    "contact_customer_service": "Contacting customer service",
    "contact_human_agent": "Talking to a person",
    "newsletter_subscription": "The newsletter: subscribing and unsubscribing",
    "check_cancellation_fee": "Cancellation fees",
}

# Held-out prompts: intent | prompt | must_contain phrases (";"-separated, lowercase).
GOLDEN = """
cancel_order | hey, I bought the wrong headphones an hour ago, can I still back out of that purchase? | cancel; order number
change_order | Is it possible to add one more item to an order I already submitted? | order number
place_order | I'd like to buy two of the blue mugs, what do I do? | checkout
track_order | my parcel was supposed to come on monday and it still isn't here, where is it? | tracking
track_order | Could you tell me where package {{Order Number}} is right now? | tracking; order number
get_refund | The blender I got stopped working after one day, I'd like my money returned. | refund
get_refund | give me back the {{Refund Amount}} for the shoes I sent back | refund
check_refund_policy | Before I buy, can you explain how returns and refunds work at your shop? | refund policy
track_refund | you said my refund was approved last week but I still don't see it, what's going on? | refund; status
change_shipping_address | oops I typed my old street, can the parcel go to my new place instead? | shipping address
set_up_shipping_address | I'd like to store my office address in my profile for future deliveries | shipping address
delivery_options | Which shipping speeds can I pick from when I check out? | delivery options
delivery_period | If I order today, roughly how many days will it take to reach me? | business days
check_payment_methods | Do you take PayPal or only credit cards? | payment methods
payment_issue | my card keeps getting refused when I try to pay, what am I doing wrong? | payment
check_invoice | I'd like to double-check the amounts on invoice {{Invoice Number}} | invoice
get_invoice | My accountant needs a PDF copy of the bill for my last order | invoice
create_account | I'm new here, how do I set up a customer account? | account; sign up
delete_account | Erase my account please, I won't be shopping here again | delete; account
edit_account | how can I update the email address on my profile? | profile
recover_password | I can't remember my login password, what now? | password; reset
switch_account | I'd like to move from my current plan to the {{Account Type}} account | switch
registration_problems | every time I hit the sign up button I get an error message | registration
complaint | I'm really disappointed, the item arrived scratched and nobody answered my emails | sorry
review | Where can I post a star rating for the lamp I bought? | review
contact_customer_service | what's the best way to reach your support staff by phone? | customer service
contact_human_agent | I'm tired of automated answers, get me a real human please | human agent
contact_human_agent | Can you transfer this chat to a live person? | connect you with; human agent
newsletter_subscription | How do I stop getting your promotional emails? | newsletter
check_cancellation_fee | Will it cost me anything to cancel my order before it ships? | cancellation fee
"""  # noqa: E501
