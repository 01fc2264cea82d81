//! The τ² retail domain: typed database and every tool of τ²'s `RetailTools`, with the same
//! checks, state changes, return values and error messages.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::pycall::{self, key, Ret, ToolRes, Validator};
use super::pyjson::{self, py_round};
use super::{en, get_mut, s, str_array, Table, ToolDef};

/// A product variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Variant {
    pub item_id: String,
    pub options: IndexMap<String, String>,
    pub available: bool,
    pub price: f64,
}

/// A product with its variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Product {
    pub name: String,
    pub product_id: String,
    pub variants: IndexMap<String, Variant>,
}

/// A user's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UserName {
    pub first_name: String,
    pub last_name: String,
}

/// A postal address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UserAddress {
    pub address1: String,
    pub address2: String,
    pub city: String,
    pub country: String,
    pub state: String,
    pub zip: String,
}

/// A saved payment method (credit card, gift card or PayPal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source")]
pub(crate) enum PaymentMethod {
    #[serde(rename = "credit_card")]
    CreditCard {
        id: String,
        brand: String,
        last_four: String,
    },
    #[serde(rename = "gift_card")]
    GiftCard { id: String, balance: f64 },
    #[serde(rename = "paypal")]
    Paypal { id: String },
}

/// A user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct User {
    pub user_id: String,
    pub name: UserName,
    pub address: UserAddress,
    pub email: String,
    pub payment_methods: IndexMap<String, PaymentMethod>,
    pub orders: Vec<String>,
}

/// A shipment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OrderFulfillment {
    pub tracking_id: Vec<String>,
    pub item_ids: Vec<String>,
}

/// An ordered item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OrderItem {
    pub name: String,
    pub product_id: String,
    pub item_id: String,
    pub price: f64,
    pub options: IndexMap<String, String>,
}

/// A payment or refund.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OrderPayment {
    pub transaction_type: String,
    pub amount: f64,
    pub payment_method_id: String,
}

/// An order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Order {
    pub order_id: String,
    pub user_id: String,
    pub address: UserAddress,
    pub items: Vec<OrderItem>,
    pub status: String,
    pub fulfillments: Vec<OrderFulfillment>,
    pub payment_history: Vec<OrderPayment>,
    #[serde(default)]
    pub cancel_reason: Option<String>,
    #[serde(default)]
    pub exchange_items: Option<Vec<String>>,
    #[serde(default)]
    pub exchange_new_items: Option<Vec<String>>,
    #[serde(default)]
    pub exchange_payment_method_id: Option<String>,
    #[serde(default)]
    pub exchange_price_difference: Option<f64>,
    #[serde(default)]
    pub return_items: Option<Vec<String>>,
    #[serde(default)]
    pub return_payment_method_id: Option<String>,
}

/// The retail database.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetailDb {
    #[serde(with = "super::table")]
    pub products: Table<Product>,
    #[serde(with = "super::table")]
    pub users: Table<User>,
    #[serde(with = "super::table")]
    pub orders: Table<Order>,
}

impl PartialEq for RetailDb {
    fn eq(&self, other: &Self) -> bool {
        super::table_eq(&self.products, &other.products)
            && super::table_eq(&self.users, &other.users)
            && super::table_eq(&self.orders, &other.orders)
    }
}

impl ToolDef {
    /// The six required address parameters shared by the retail address tools.
    fn with_address_fields(self) -> Self {
        self.req(
            "address1",
            s("The first line of the address, such as '123 Main St'."),
        )
        .req(
            "address2",
            s("The second line of the address, such as 'Apt 1' or ''."),
        )
        .req("city", s("The city, such as 'San Francisco'."))
        .req("state", s("The state, such as 'CA'."))
        .req("country", s("The country, such as 'USA'."))
        .req("zip", s("The zip code, such as '12345'."))
    }
}

const ORDER_ID: &str = "The order id, such as '#W0000000'. Be careful there is a '#' symbol at the beginning of the order id.";
const PAYMENT_ID: &str = "The payment method id to pay or receive refund for the item price difference, such as 'gift_card_0000000' or 'credit_card_0000000'. These can be looked up from the user or order details.";

/// The tools in τ²'s definition order.
pub(crate) fn tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef::new(
            "calculate",
            "Calculate the result of a mathematical expression.",
        )
        .req("expression", s("The mathematical expression to calculate, such as '2 + 2'. The expression can contain numbers, operators (+, -, *, /), parentheses, and spaces.")),
        ToolDef::new(
            "cancel_pending_order",
            "Cancel a pending order. If the order is already processed or delivered, it cannot be cancelled. The agent needs to explain the cancellation detail and ask for explicit user confirmation (yes/no) to proceed. If the user confirms, the order status will be changed to 'cancelled' and the payment will be refunded. The refund will be added to the user's gift card balance immediately if the payment was made using a gift card, otherwise the refund would take 5-7 business days to process. The function returns the order details after the cancellation.",
        )
        .req("order_id", s(ORDER_ID))
        .req("reason", en("The reason for cancellation, which should be either 'no longer needed' or 'ordered by mistake'.", &["no longer needed", "ordered by mistake"])),
        ToolDef::new(
            "exchange_delivered_order_items",
            "Exchange items in a delivered order to new items of the same product type. For a delivered order, return or exchange can be only done once by the agent. The agent needs to explain the exchange detail and ask for explicit user confirmation (yes/no) to proceed.",
        )
        .req("order_id", s(ORDER_ID))
        .req("item_ids", str_array("The item ids to be exchanged, each such as '1008292230'. There could be duplicate items in the list."))
        .req("new_item_ids", str_array("The item ids to be exchanged for, each such as '1008292230'. There could be duplicate items in the list. Each new item id should match the item id in the same position and be of the same product."))
        .req("payment_method_id", s(PAYMENT_ID)),
        ToolDef::new(
            "find_user_id_by_name_zip",
            "Find user id by first name, last name, and zip code. If the user is not found, the function will return an error message. By default, find user id by email, and only call this function if the user is not found by email or cannot remember email.",
        )
        .req("first_name", s("The first name of the customer, such as 'John'."))
        .req("last_name", s("The last name of the customer, such as 'Doe'."))
        .req("zip", s("The zip code of the customer, such as '12345'.")),
        ToolDef::new(
            "find_user_id_by_email",
            "Find user id by email. If the user is not found, the function will return an error message.",
        )
        .req("email", s("The email of the user, such as 'something@example.com'.")),
        ToolDef::new("get_order_details", "Get the status and details of an order.")
            .req("order_id", s(ORDER_ID)),
        ToolDef::new("get_product_details", "Get the inventory details of a product.")
            .req("product_id", s("The product id, such as '6086499569'. Be careful the product id is different from the item id.")),
        ToolDef::new("get_user_details", "Get the details of a user, including their orders.")
            .req("user_id", s("The user id, such as 'sara_doe_496'.")),
        ToolDef::new(
            "list_all_product_types",
            "List the name and product id of all product types. Each product type has a variety of different items with unique item ids and options. There are only 50 product types in the store.",
        ),
        ToolDef::new(
            "modify_pending_order_address",
            "Modify the shipping address of a pending order. The agent needs to explain the modification detail and ask for explicit user confirmation (yes/no) to proceed.",
        )
        .req("order_id", s(ORDER_ID))
        .with_address_fields(),
        ToolDef::new(
            "modify_pending_order_items",
            "Modify items in a pending order to new items of the same product type. For a pending order, this function can only be called once. The agent needs to explain the exchange detail and ask for explicit user confirmation (yes/no) to proceed.",
        )
        .req("order_id", s(ORDER_ID))
        .req("item_ids", str_array("The item ids to be modified, each such as '1008292230'. There could be duplicate items in the list."))
        .req("new_item_ids", str_array("The item ids to be modified for, each such as '1008292230'. There could be duplicate items in the list. Each new item id should match the item id in the same position and be of the same product."))
        .req("payment_method_id", s(PAYMENT_ID)),
        ToolDef::new(
            "modify_pending_order_payment",
            "Modify the payment method of a pending order. The agent needs to explain the modification detail and ask for explicit user confirmation (yes/no) to proceed.",
        )
        .req("order_id", s(ORDER_ID))
        .req("payment_method_id", s(PAYMENT_ID)),
        ToolDef::new(
            "modify_user_address",
            "Modify the default address of a user. The agent needs to explain the modification detail and ask for explicit user confirmation (yes/no) to proceed.",
        )
        .req("user_id", s("The user id, such as 'sara_doe_496'."))
        .with_address_fields(),
        ToolDef::new(
            "return_delivered_order_items",
            "Return some items of a delivered order. The order status will be changed to 'return requested'. The agent needs to explain the return detail and ask for explicit user confirmation (yes/no) to proceed. The user will receive follow-up email for how and where to return the item.",
        )
        .req("order_id", s(ORDER_ID))
        .req("item_ids", str_array("The item ids to be returned, each such as '1008292230'. There could be duplicate items in the list."))
        .req("payment_method_id", s("The payment method id to pay or receive refund for the item price difference, such as 'gift_card_0000000' or 'credit_card_0000000'. These can be looked up from the user or order details.")),
        ToolDef::new(
            "transfer_to_human_agents",
            "Transfer the user to a human agent, with a summary of the user's issue. Only transfer if the user explicitly asks for a human agent, or given the policy and the available tools, you cannot solve the user's issue.",
        )
        .req("summary", s("A summary of the user's issue.")),
    ]
}

fn json<T: Serialize>(v: &T) -> Ret {
    Ret::Json(serde_json::to_value(v).unwrap_or(Value::Null))
}

/// Run a retail tool (arguments already bound).
pub(crate) fn call(db: &mut RetailDb, name: &str, a: &Map<String, Value>) -> ToolRes {
    let arg = |k: &str| a.get(k).unwrap_or(&Value::Null);
    match name {
        "calculate" => super::calc::calculate(arg("expression")).map(Ret::Text),
        "cancel_pending_order" => cancel_pending_order(db, arg("order_id"), arg("reason")),
        "exchange_delivered_order_items" => exchange_or_modify_items(
            db,
            arg("order_id"),
            arg("item_ids"),
            arg("new_item_ids"),
            arg("payment_method_id"),
            false,
        ),
        "find_user_id_by_name_zip" => {
            let (first, last, zip) = (arg("first_name"), arg("last_name"), arg("zip"));
            for (user_id, user) in &db.users {
                if pycall::py_lower(&user.name.first_name) == pycall::lower(first)?
                    && pycall::py_lower(&user.name.last_name) == pycall::lower(last)?
                    && key(zip) == Some(user.address.zip.as_str())
                {
                    return Ok(Ret::Text(user_id.clone()));
                }
            }
            Err("User not found".into())
        }
        "find_user_id_by_email" => {
            let email = arg("email");
            for (user_id, user) in &db.users {
                if pycall::py_lower(&user.email) == pycall::lower(email)? {
                    return Ok(Ret::Text(user_id.clone()));
                }
            }
            Err("User not found".into())
        }
        "get_order_details" => Ok(json(get_order(db, arg("order_id"))?)),
        "get_product_details" => Ok(json(get_product(db, arg("product_id"))?)),
        "get_user_details" => Ok(json(get_user(db, arg("user_id"))?)),
        "list_all_product_types" => {
            let mut m = Map::new();
            for p in db.products.values() {
                m.insert(p.name.clone(), Value::String(p.product_id.clone()));
            }
            Ok(Ret::Text(pyjson::dumps(&Value::Object(m), true)))
        }
        "modify_pending_order_address" => {
            let order = get_order(db, arg("order_id"))?;
            if !order.status.contains("pending") {
                return Err("Non-pending order cannot be modified".into());
            }
            let address = address_from_args(a)?;
            let id = order.order_id.clone();
            let order = get_mut(&mut db.orders, &id).expect("order exists");
            order.address = address;
            Ok(json(order))
        }
        "modify_pending_order_items" => exchange_or_modify_items(
            db,
            arg("order_id"),
            arg("item_ids"),
            arg("new_item_ids"),
            arg("payment_method_id"),
            true,
        ),
        "modify_pending_order_payment" => {
            modify_pending_order_payment(db, arg("order_id"), arg("payment_method_id"))
        }
        "modify_user_address" => {
            let user_id = get_user(db, arg("user_id"))?.user_id.clone();
            let address = address_from_args(a)?;
            let user = get_mut(&mut db.users, &user_id).expect("user exists");
            user.address = address;
            Ok(json(user))
        }
        "return_delivered_order_items" => return_delivered_order_items(
            db,
            arg("order_id"),
            arg("item_ids"),
            arg("payment_method_id"),
        ),
        "transfer_to_human_agents" => Ok(Ret::Text("Transfer successful".into())),
        other => Err(format!("Tool '{other}' not found.")),
    }
}

fn address_from_args(a: &Map<String, Value>) -> std::result::Result<UserAddress, String> {
    let mut v = Validator::new("UserAddress", a);
    let address = UserAddress {
        address1: v.string("address1"),
        address2: v.string("address2"),
        city: v.string("city"),
        country: v.string("country"),
        state: v.string("state"),
        zip: v.string("zip"),
    };
    v.finish()?;
    Ok(address)
}

fn get_order<'d>(db: &'d RetailDb, order_id: &Value) -> std::result::Result<&'d Order, String> {
    key(order_id)
        .and_then(|k| db.orders.get(k))
        .map(|o| &**o)
        .ok_or_else(|| "Order not found".to_string())
}

fn get_user<'d>(db: &'d RetailDb, user_id: &Value) -> std::result::Result<&'d User, String> {
    key(user_id)
        .and_then(|k| db.users.get(k))
        .map(|u| &**u)
        .ok_or_else(|| "User not found".to_string())
}

fn get_product<'d>(
    db: &'d RetailDb,
    product_id: &Value,
) -> std::result::Result<&'d Product, String> {
    key(product_id)
        .and_then(|k| db.products.get(k))
        .map(|p| &**p)
        .ok_or_else(|| "Product not found".to_string())
}

fn get_variant<'d>(
    db: &'d RetailDb,
    product_id: &str,
    variant_id: &str,
) -> std::result::Result<&'d Variant, String> {
    let product = db.products.get(product_id).ok_or("Product not found")?;
    product
        .variants
        .get(variant_id)
        .ok_or_else(|| "Variant not found".to_string())
}

fn get_payment_method<'d>(
    db: &'d RetailDb,
    user_id: &str,
    payment_method_id: &Value,
) -> std::result::Result<&'d PaymentMethod, String> {
    let user = db.users.get(user_id).ok_or("User not found")?;
    key(payment_method_id)
        .and_then(|k| user.payment_methods.get(k))
        .ok_or_else(|| "Payment method not found".to_string())
}

/// Add `delta` to a gift card's balance and round to cents (no-op for other methods).
fn adjust_gift_card(db: &mut RetailDb, user_id: &str, pm_id: &str, delta: f64) {
    if let Some(user) = get_mut(&mut db.users, user_id) {
        if let Some(PaymentMethod::GiftCard { balance, .. }) = user.payment_methods.get_mut(pm_id) {
            *balance = py_round(*balance + delta, 2);
        }
    }
}

fn is_gift_card(pm: &PaymentMethod) -> bool {
    matches!(pm, PaymentMethod::GiftCard { .. })
}

fn gift_balance(pm: &PaymentMethod) -> f64 {
    match pm {
        PaymentMethod::GiftCard { balance, .. } => *balance,
        _ => 0.0,
    }
}

fn cancel_pending_order(db: &mut RetailDb, order_id: &Value, reason: &Value) -> ToolRes {
    let order = get_order(db, order_id)?;
    if order.status != "pending" {
        return Err("Non-pending order cannot be cancelled".into());
    }
    let reason = match reason.as_str() {
        Some(r @ ("no longer needed" | "ordered by mistake")) => r.to_string(),
        _ => return Err("Invalid reason".into()),
    };
    let oid = order.order_id.clone();
    let uid = order.user_id.clone();
    let payments = order.payment_history.clone();
    let mut refunds = Vec::new();
    for p in &payments {
        refunds.push(OrderPayment {
            transaction_type: "refund".into(),
            amount: p.amount,
            payment_method_id: p.payment_method_id.clone(),
        });
        let pm = get_payment_method(db, &uid, &Value::String(p.payment_method_id.clone()))?;
        if is_gift_card(pm) {
            adjust_gift_card(db, &uid, &p.payment_method_id, p.amount);
        }
    }
    let order = get_mut(&mut db.orders, &oid).expect("order exists");
    order.status = "cancelled".into();
    order.cancel_reason = Some(reason);
    order.payment_history.extend(refunds);
    Ok(json(order))
}

/// Python's `list.count` check used by the item tools: every requested id must occur at least
/// as often in the order.
fn first_missing<'a>(requested: &'a [Value], present: &[String]) -> Option<&'a Value> {
    requested.iter().find(|id| {
        requested.iter().filter(|x| x == id).count()
            > present
                .iter()
                .filter(|x| key(id) == Some(x.as_str()))
                .count()
    })
}

fn exchange_or_modify_items(
    db: &mut RetailDb,
    order_id: &Value,
    item_ids: &Value,
    new_item_ids: &Value,
    payment_method_id: &Value,
    modify: bool,
) -> ToolRes {
    let order = get_order(db, order_id)?;
    if modify {
        if order.status != "pending" {
            return Err("Non-pending order cannot be modified".into());
        }
    } else if order.status != "delivered" {
        return Err("Non-delivered order cannot be exchanged".into());
    }
    let item_ids = pycall::value_list(item_ids)?;
    let all_item_ids: Vec<String> = order.items.iter().map(|i| i.item_id.clone()).collect();
    if let Some(missing) = first_missing(&item_ids, &all_item_ids) {
        let missing = super::pyjson::py_str(missing);
        return Err(if modify {
            format!("{missing} not found")
        } else {
            format!("Number of {missing} not found.")
        });
    }
    // Every requested id was found among the order's (string) item ids.
    let item_ids = pycall::strings(&item_ids);
    let new_item_values = pycall::value_list(new_item_ids)?;
    if item_ids.len() != new_item_values.len() {
        return Err(if modify {
            "The number of items to be exchanged should match".into()
        } else {
            "The number of items to be exchanged should match.".into()
        });
    }
    let mut diff_price = 0.0f64;
    let mut last_variant: Option<Variant> = None;
    for (item_id, new_item_value) in item_ids.iter().zip(&new_item_values) {
        if modify && key(new_item_value) == Some(item_id.as_str()) {
            return Err("The new item id should be different from the old item id".into());
        }
        let item = order
            .items
            .iter()
            .find(|i| &i.item_id == item_id)
            .ok_or_else(|| format!("Item {item_id} not found"))?;
        let new_item_id = key(new_item_value).ok_or("Variant not found")?;
        let variant = get_variant(db, &item.product_id, new_item_id)?;
        if !variant.available {
            return Err(format!("New item {new_item_id} not found or available"));
        }
        diff_price += variant.price - item.price;
        last_variant = Some(variant.clone());
    }
    // Every new id was found as a variant, so all are strings.
    let new_item_ids = pycall::strings(&new_item_values);
    let oid = order.order_id.clone();
    let uid = order.user_id.clone();
    if !modify {
        diff_price = py_round(diff_price, 2);
    }
    let pm = get_payment_method(db, &uid, payment_method_id)?;
    let pm_id = payment_method_id.as_str().unwrap_or_default().to_string();
    if is_gift_card(pm) && gift_balance(pm) < diff_price {
        return Err(if modify {
            "Insufficient gift card balance to pay for the new item".into()
        } else {
            "Insufficient gift card balance to pay for the price difference".into()
        });
    }
    if !modify {
        let mut sorted_old = item_ids.clone();
        sorted_old.sort();
        let mut sorted_new = new_item_ids.clone();
        sorted_new.sort();
        let order = get_mut(&mut db.orders, &oid).expect("order exists");
        order.status = "exchange requested".into();
        order.exchange_items = Some(sorted_old);
        order.exchange_new_items = Some(sorted_new);
        order.exchange_payment_method_id = Some(pm_id);
        order.exchange_price_difference = Some(diff_price);
        return Ok(json(order));
    }
    let gift = is_gift_card(pm);
    {
        let order = get_mut(&mut db.orders, &oid).expect("order exists");
        order.payment_history.push(OrderPayment {
            transaction_type: if diff_price > 0.0 {
                "payment"
            } else {
                "refund"
            }
            .into(),
            amount: diff_price.abs(),
            payment_method_id: pm_id.clone(),
        });
    }
    if gift {
        adjust_gift_card(db, &uid, &pm_id, -diff_price);
    }
    let order = get_mut(&mut db.orders, &oid).expect("order exists");
    // τ² applies the price and options of the *last* looked-up variant to every modified item.
    let variant = last_variant;
    for (item_id, new_item_id) in item_ids.iter().zip(&new_item_ids) {
        let item = order
            .items
            .iter_mut()
            .find(|i| &i.item_id == item_id)
            .ok_or_else(|| format!("Item {item_id} not found"))?;
        item.item_id = new_item_id.clone();
        if let Some(v) = &variant {
            item.price = v.price;
            item.options = v.options.clone();
        }
    }
    order.status = "pending (item modified)".into();
    Ok(json(order))
}

fn modify_pending_order_payment(
    db: &mut RetailDb,
    order_id: &Value,
    payment_method_id: &Value,
) -> ToolRes {
    let order = get_order(db, order_id)?;
    if !order.status.contains("pending") {
        return Err("Non-pending order cannot be modified".into());
    }
    let oid = order.order_id.clone();
    let uid = order.user_id.clone();
    let pm = get_payment_method(db, &uid, payment_method_id)?;
    if order.payment_history.len() != 1 || order.payment_history[0].transaction_type != "payment" {
        return Err("There should be exactly one payment for a pending order".into());
    }
    let pm_id = payment_method_id.as_str().unwrap_or_default().to_string();
    let old_id = order.payment_history[0].payment_method_id.clone();
    if old_id == pm_id {
        return Err("The new payment method should be different from the current one".into());
    }
    let amount = order.payment_history[0].amount;
    if is_gift_card(pm) && gift_balance(pm) < amount {
        return Err("Insufficient gift card balance to pay for the order".into());
    }
    let new_is_gift = is_gift_card(pm);
    {
        let order = get_mut(&mut db.orders, &oid).expect("order exists");
        order.payment_history.push(OrderPayment {
            transaction_type: "payment".into(),
            amount,
            payment_method_id: pm_id.clone(),
        });
        order.payment_history.push(OrderPayment {
            transaction_type: "refund".into(),
            amount,
            payment_method_id: old_id.clone(),
        });
    }
    if new_is_gift {
        adjust_gift_card(db, &uid, &pm_id, -amount);
    }
    let old_pm = get_payment_method(db, &uid, &Value::String(old_id.clone()))?;
    if is_gift_card(old_pm) {
        adjust_gift_card(db, &uid, &old_id, amount);
    }
    Ok(json(&*db.orders[&oid]))
}

fn return_delivered_order_items(
    db: &mut RetailDb,
    order_id: &Value,
    item_ids: &Value,
    payment_method_id: &Value,
) -> ToolRes {
    let order = get_order(db, order_id)?;
    if order.status != "delivered" {
        return Err("Non-delivered order cannot be returned".into());
    }
    let oid = order.order_id.clone();
    let uid = order.user_id.clone();
    let user = get_user(db, &Value::String(uid.clone()))?;
    let pm = get_payment_method(db, &user.user_id, payment_method_id)?;
    let pm_id = payment_method_id.as_str().unwrap_or_default().to_string();
    let original = order
        .payment_history
        .first()
        .map(|p| p.payment_method_id.clone())
        .ok_or("list index out of range")?;
    if !is_gift_card(pm) && pm_id != original {
        return Err("Payment method should be the original payment method".into());
    }
    let item_ids = pycall::value_list(item_ids)?;
    let all_item_ids: Vec<String> = order.items.iter().map(|i| i.item_id.clone()).collect();
    if first_missing(&item_ids, &all_item_ids).is_some() {
        return Err("Some item not found".into());
    }
    let mut sorted = pycall::strings(&item_ids);
    sorted.sort();
    let order = get_mut(&mut db.orders, &oid).expect("order exists");
    order.status = "return requested".into();
    order.return_items = Some(sorted);
    order.return_payment_method_id = Some(pm_id);
    Ok(json(order))
}
